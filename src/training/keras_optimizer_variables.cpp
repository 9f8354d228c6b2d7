#include "training/keras_optimizer_variables.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "lockstep/io/checkpoint.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"

namespace lockstep::detail {

namespace {
using optimizers::LossScaleOptimizer;
using optimizers::Optimizer;

constexpr const char* kGroup = "optimizer/vars";
constexpr const char* kInnerGroup = "optimizer/inner_optimizer/vars";

// One of Keras' optimizer.variables, and the optimizer of lockstep's that holds it.
enum class Kind {
  kIterations,
  kLearningRate,
  kWrapperCount,  // a LossScaleOptimizer's own iterations and learning_rate, which Keras leaves at 0
  kWrapperRate,
  kStepCounter,
  kDynamicScale,
  kSlot,
};
struct Entry {
  Kind kind;
  Optimizer* owner;
  std::string what;  // for messages: "iterations", "slot 'm' of variable 'dense/kernel'"
  DType dtype;
  Shape shape;
  Variable variable;  // kSlot: the model's variable
  std::size_t slot = 0;  // kSlot: its index in slot_names()
};

// Keras' optimizer.variables of `opt` for the model's trainable variables, in Keras' order: as
// before its first step (unbuilt) or after.
std::vector<Entry> keras_entries(Optimizer& opt, const std::vector<Variable>& trainable, bool built) {
  std::vector<Entry> out;
  const auto scalar = [&](Kind kind, Optimizer& owner, std::string what, DType dtype) {
    out.push_back({kind, &owner, std::move(what), dtype, Shape{}, Variable(), 0});
  };
  // `counter` counts the steps: a LossScaleOptimizer's count is the one its steps use (Keras reads
  // its inner optimizer's iterations for it).
  const auto own = [&](Optimizer& o, Optimizer& counter) {
    scalar(Kind::kIterations, counter, "iterations", DType::kI64);
    if (!o.options().schedule) scalar(Kind::kLearningRate, o, "learning_rate", DType::kF32);
    if (!built) return;
    const std::vector<std::string> names = o.slot_names();
    const auto slot = [&](const Variable& v, std::size_t s) {
      out.push_back({Kind::kSlot, &o, "slot '" + names[s] + "' of variable '" + v.name() + "'", DType::kF32,
                     v.shape(), v, s});
    };
    if (o.keras_slots_by_variable()) {
      for (const Variable& v : trainable)
        for (std::size_t s = 0; s < names.size(); ++s) slot(v, s);
    } else {
      for (std::size_t s = 0; s < names.size(); ++s)
        for (const Variable& v : trainable) slot(v, s);
    }
  };
  if (auto* ls = dynamic_cast<LossScaleOptimizer*>(&opt)) {
    scalar(Kind::kWrapperCount, opt, "the LossScaleOptimizer's own iterations", DType::kI64);
    scalar(Kind::kWrapperRate, opt, "the LossScaleOptimizer's own learning_rate", DType::kF32);
    if (built) {
      scalar(Kind::kStepCounter, opt, "step_counter", DType::kI64);
      scalar(Kind::kDynamicScale, opt, "dynamic_scale", DType::kF32);
    }
    own(*ls->inner_optimizer(), opt);
  } else {
    own(opt, opt);
  }
  return out;
}

Tensor int_scalar(std::int64_t v) { return Tensor::from_vector(std::vector<std::int64_t>{v}, Shape{}); }
Tensor float_scalar(double v) { return Tensor::from_vector(std::vector<float>{static_cast<float>(v)}, Shape{}); }

// The value the optimizer holds now for `e`.
Tensor value_of(const Entry& e) {
  const auto* ls = dynamic_cast<const LossScaleOptimizer*>(e.owner);
  switch (e.kind) {
    case Kind::kIterations: return int_scalar(e.owner->iterations());
    case Kind::kLearningRate: return float_scalar(e.owner->current_learning_rate());
    case Kind::kWrapperCount: return int_scalar(0);
    case Kind::kWrapperRate: return float_scalar(0.0);
    case Kind::kStepCounter: return int_scalar(ls->step_counter());
    case Kind::kDynamicScale: return float_scalar(ls->loss_scale());
    case Kind::kSlot: return io::slots_to_save(*e.owner, e.variable).at(e.slot).second.on_host();
  }
  throw InternalError("keras_optimizer_variables: unknown entry kind");
}

std::string keras_name(const Optimizer& opt) {
  if (dynamic_cast<const LossScaleOptimizer*>(&opt)) return "loss_scale_optimizer";
  std::string lower = opt.name();  // "Adam" -> "adam", as compile_config's name
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return lower;
}

void write_group(const std::string& group, const std::string& name, const std::vector<Entry>& entries,
                 io::H5Content& h5) {
  h5.groups.push_back({group, {{"name", name}}});
  for (std::size_t i = 0; i < entries.size(); ++i)
    h5.datasets.push_back({group + "/" + std::to_string(i), value_of(entries[i])});
}

// The datasets directly in `group`, by their names "0", "1", ...: every index below their count.
std::vector<const Tensor*> datasets_in(const io::H5Content& h5, const std::string& group, const std::string& source) {
  const std::string prefix = group + "/";
  std::size_t n = 0;
  for (const auto& d : h5.datasets)
    if (d.path.rfind(prefix, 0) == 0 && d.path.find('/', prefix.size()) == std::string::npos) ++n;
  std::vector<const Tensor*> out;
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor* t = h5.find_dataset(prefix + std::to_string(i));
    if (t == nullptr)
      throw IOError(source + " has " + std::to_string(n) + " datasets in " + group + " but no " + prefix +
                    std::to_string(i) + " (Keras numbers an optimizer's variables 0, 1, ...)");
    out.push_back(t);
  }
  return out;
}

// Whether `t` can be what `e` is; the problem otherwise, and a value out of range.
std::string mismatch(const Entry& e, const Tensor& t) {
  if (t.shape() != e.shape || t.dtype() != e.dtype)
    return "is " + t.shape().str() + " " + dtype_name(t.dtype()) + " but the optimizer's " + e.what + " is " +
           e.shape.str() + " " + dtype_name(e.dtype);
  if (e.kind == Kind::kSlot || e.kind == Kind::kWrapperCount || e.kind == Kind::kWrapperRate) return {};
  if (e.dtype == DType::kI64) {
    const std::int64_t v = t.to_vector<std::int64_t>()[0];
    if (v < 0) return "holds " + e.what + " " + std::to_string(v) + ", which must be >= 0";
    return {};
  }
  const double v = t.to_vector<float>()[0];
  const double least = e.kind == Kind::kDynamicScale ? 1.0 : 0.0;  // lockstep's scale never goes below 1
  if (!std::isfinite(v) || v < least)
    return "holds " + e.what + " " + std::to_string(v) + ", which must be a finite number >= " +
           std::to_string(static_cast<int>(least));
  return {};
}

// Assigns the checked values to the optimizers of `entries`.
void restore(Optimizer& top, const std::vector<Entry>& entries, const std::vector<Tensor>& values) {
  auto* ls = dynamic_cast<LossScaleOptimizer*>(&top);
  std::int64_t counter = 0;
  double scale = 0;
  std::map<const void*, std::pair<Optimizer*, Variable>> with_slots;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const Tensor& t = values[i];
    switch (e.kind) {
      case Kind::kIterations: e.owner->set_iterations(t.to_vector<std::int64_t>()[0]); break;
      case Kind::kLearningRate: {
        // The file keeps the rate as float32; the compile config's (a double) stays where it rounds
        // to the same, so that the rate reads and saves again as it was set.
        const float lr = t.to_vector<float>()[0];
        if (static_cast<float>(e.owner->current_learning_rate()) != lr) e.owner->set_learning_rate(lr);
        break;
      }
      case Kind::kWrapperCount:
      case Kind::kWrapperRate: break;
      case Kind::kStepCounter: counter = t.to_vector<std::int64_t>()[0]; break;
      case Kind::kDynamicScale: scale = t.to_vector<float>()[0]; break;
      case Kind::kSlot:
        e.owner->slots(e.variable).at(e.slot).second.copy_from(t);
        with_slots.try_emplace(e.variable.identity(), e.owner, e.variable);
        break;
    }
  }
  // Loaded into the primary copy of a mirrored variable's slots: every replica gets the same.
  for (const auto& entry : with_slots) entry.second.first->broadcast_slots(entry.second.second);
  if (ls != nullptr && scale >= 1.0) ls->set_state(scale, counter, ls->skipped_steps());
}
}  // namespace

void add_keras_optimizer_variables(const Model& model, io::H5Content& h5) {
  if (!model.compiled()) return;
  Optimizer& opt = *model.optimizer();
  const std::vector<Variable> trainable = model.trainable_variables();
  const bool built = opt.built();
  const std::vector<Entry> entries = keras_entries(opt, trainable, built);
  write_group(kGroup, keras_name(opt), entries, h5);
  if (auto* ls = dynamic_cast<LossScaleOptimizer*>(&opt)) {  // the inner optimizer's part, again
    const std::vector<Entry> inner(entries.begin() + (built ? 4 : 2), entries.end());
    write_group(kInnerGroup, keras_name(*ls->inner_optimizer()), inner, h5);
  }
}

std::function<void()> check_keras_optimizer_variables(const io::H5Content& h5, const std::string& source,
                                                      Model& model) {
  if (!model.compiled()) return {};
  const std::vector<const Tensor*> found = datasets_in(h5, kGroup, source);
  if (found.empty()) return {};  // a file without them: a fresh optimizer, built at the first step
  const optimizers::OptimizerPtr held = model.optimizer();
  Optimizer& opt = *held;
  const std::vector<Variable> trainable = model.trainable_variables();
  std::vector<Entry> entries = keras_entries(opt, trainable, /*built=*/true);
  if (found.size() != entries.size()) {
    // Saved before its first step (Keras' unbuilt optimizer): its count and rate, as a fresh one's.
    if (found.size() == keras_entries(opt, trainable, /*built=*/false).size()) return {};
    // Keras 3 (Optimizer.load_own_variables) warns and skips: its optimizer then starts afresh.
    std::fprintf(stderr,
                 "WARNING: %s: skipping variable loading for optimizer '%s', because it has %zu variables whereas "
                 "the saved optimizer has %zu variables (another optimizer, or another model's); it starts afresh\n",
                 source.c_str(), keras_name(opt).c_str(), entries.size(), found.size());
    return {};
  }
  std::vector<Tensor> values;
  values.reserve(found.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (const std::string problem = mismatch(entries[i], *found[i]); !problem.empty())
      throw IOError(source + " " + kGroup + "/" + std::to_string(i) + " " + problem + " (optimizer " +
                    opt.name() + ")");
    values.push_back(*found[i]);
  }
  return [held, entries = std::move(entries), values = std::move(values)] { restore(*held, entries, values); };
}

}  // namespace lockstep::detail
