#include "lockstep/datasets/npz_dataset.hpp"

#include <algorithm>
#include <utility>

#include "lockstep/data/npz.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::datasets {

namespace {
bool is_integer(DType d) { return d == DType::kU8 || d == DType::kI32 || d == DType::kI64; }
}  // namespace

TrainTest load_npz(const std::string& path, const NpzOptions& options) {
  // Only the four arrays are inflated: other members of the archive cost nothing.
  const data::NpzSelection npz = data::read_npz(path, {"x_train", "y_train", "x_test", "y_test"});
  const auto& arrays = npz.arrays;
  const auto fail = [&](const std::string& what) { return IOError("dataset '" + path + "': " + what); };
  const auto get = [&](const char* name) {
    const auto it = arrays.find(name);
    if (it == arrays.end()) {
      std::string have;
      for (const auto& k : npz.names) have += (have.empty() ? "" : ", ") + k;
      throw fail(std::string("has no array '") + name + "' (it needs x_train, y_train, x_test, y_test; it holds " +
                 (have.empty() ? "none" : have) + ")");
    }
    return it->second;
  };
  TrainTest d{{get("x_train"), get("y_train")}, {get("x_test"), get("y_test")}};
  for (const auto& [split, s] : {std::pair<const char*, const Split&>{"train", d.train}, {"test", d.test}}) {
    const std::string x = std::string("x_") + split, y = std::string("y_") + split;
    if (s.x.rank() < 2)
      throw fail(x + " has shape " + s.x.shape().str() + "; it needs one example per row (N, ...)");
    if (s.x.dtype() != DType::kU8 && s.x.dtype() != DType::kF32)
      throw fail(x + " holds " + dtype_name(s.x.dtype()) + "; give uint8 images or float32 features");
    if (s.x.dim(0) == 0) throw fail(x + " has no examples");
    if (options.any_targets) {
      if (!is_integer(s.y.dtype()) && s.y.dtype() != DType::kF32)
        throw fail(y + " holds " + dtype_name(s.y.dtype()) + "; give integer class labels or float32 targets");
      if (s.y.rank() != 1 && s.y.rank() != 2)
        throw fail(y + " has shape " + s.y.shape().str() + "; give one target per example (N,) or one row (N, k)");
    } else {
      if (!is_integer(s.y.dtype()))
        throw fail(y + " holds " + dtype_name(s.y.dtype()) + "; give integer class labels");
      if (!(s.y.rank() == 1 || (s.y.rank() == 2 && s.y.dim(1) == 1)))
        throw fail(y + " has shape " + s.y.shape().str() + "; give one class label per example, (N,) or (N, 1)");
    }
    if (s.y.dim(0) != s.x.dim(0))
      throw fail(x + " has " + std::to_string(s.x.dim(0)) + " examples but " + y + " has " +
                 std::to_string(s.y.dim(0)) + " labels");
  }
  if (d.train.x.shape().tail() != d.test.x.shape().tail())
    throw fail("x_train examples are " + d.train.x.shape().tail().str() + " but x_test examples are " +
               d.test.x.shape().tail().str());
  const auto per_example = [](const Tensor& y) { return y.rank() == 1 ? 1 : y.dim(1); };
  if (per_example(d.train.y) != per_example(d.test.y))
    throw fail("y_train has shape " + d.train.y.shape().str() + " but y_test has shape " + d.test.y.shape().str() +
               " (a different number of values per example)");
  if (per_example(d.train.y) == 1 && is_integer(d.train.y.dtype()) != is_integer(d.test.y.dtype()))
    throw fail(std::string("y_train holds ") + dtype_name(d.train.y.dtype()) + " but y_test holds " +
               dtype_name(d.test.y.dtype()) + "; give both splits targets of one kind");
  for (Split* s : {&d.train, &d.test}) {
    if (!is_integer(s->y.dtype()) || per_example(s->y) > 1) {  // targets, not class labels (any_targets)
      s->y = s->y.to(DType::kF32);
      continue;
    }
    s->y = s->y.reshape({s->y.dim(0)}).to(DType::kI64);
    const auto labels = s->y.to_vector<std::int64_t>();
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] < 0)
        throw fail(std::string(s == &d.train ? "y_train" : "y_test") + "[" + std::to_string(i) + "] is " +
                   std::to_string(labels[i]) + "; class labels start at 0");
  }
  return d;
}

LabelAt largest_label(const TrainTest& d) {
  LabelAt top;
  for (const auto& [name, split] : {std::pair<const char*, const Split*>{"y_train", &d.train}, {"y_test", &d.test}}) {
    const auto labels = split->y.to(DType::kI64).to_vector<std::int64_t>();
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] > top.value) top = {name, static_cast<std::int64_t>(i), labels[i]};
  }
  return top;
}

std::int64_t num_classes(const TrainTest& d) { return std::max<std::int64_t>(largest_label(d).value, 0) + 1; }

}  // namespace lockstep::datasets
