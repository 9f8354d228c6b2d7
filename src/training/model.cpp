// The Model class: its structure, compile, calls, metric trackers, and where its variables live.
// Its train step is train_step.cpp's; the numbers of its steps, merged across replicas, are
// step_numbers.cpp's; jit_compile's state is jit_compile.cpp's.
#include "lockstep/training/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/training/preprocessing.hpp"
#include "training/replica_slices.hpp"

namespace lockstep {


std::size_t Structure::index_of(const std::string& name, const char* what) const {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return i;
  throw ValueError(std::string("'") + name + "' is not an " + what + " of the model; its " + what + "s are: " + joined());
}

std::string Structure::joined() const {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void Model::set_steps_per_execution(std::int64_t n) {
  LOCKSTEP_CHECK(n >= 1, "Model::compile: steps_per_execution must be a positive integer, got ", n);
  steps_per_execution_ = n;
}

Model::Model(std::string name) : seed_(random_seed()), name_(std::move(name)) {
  set_strategy(distribute::Strategy::current());
}
Model::~Model() = default;

Tensor Model::input_of(const Tensor& x) const {
  // Integer pixels go to a model that scales its own input as they are: its Rescaling casts and
  // scales them in one pass (cast_and_scale), the same floats as casting here first; token ids to
  // an Embedding, which checks them on the host where the input path kept their bytes.
  if (!is_floating(x.dtype()) && takes_integer_input(*this)) return x;
  return x.to(DType::kF32);
}

Tensor Model::as_float32(const Tensor& t) {
  return is_floating(t.dtype()) ? cast(t, DType::kF32) : t;
}

void Model::set_seed(std::uint64_t seed) {
  LOCKSTEP_CHECK(!built(), "Model::set_seed must be called before the model is built");
  seed_ = seed;
}

void Model::set_strategy(distribute::Strategy* strategy) {
  strategy_ = strategy;
  strategy_lifetime_ = strategy ? strategy->lifetime() : std::weak_ptr<const void>();
  strategy_name_ = strategy ? strategy->name() : std::string();
}

void Model::check_strategy_alive() const {
  LOCKSTEP_CHECK(!strategy_ || !strategy_lifetime_.expired(), "model '", name(), "' was made in the scope of a ",
                 strategy_name_, " (or distributed to it) that no longer exists: keep the strategy alive while its "
                 "models are used (its variables' copies were on that strategy's devices; their values can still "
                 "be read, e.g. to load into a model made under another)");
}

void Model::check_strategy_scope(const char* what) {
  check_strategy_alive();
  distribute::Strategy* open = distribute::Strategy::current();
  if (!open || open == strategy_) return;
  if (!strategy_ && !built()) {
    set_strategy(open);  // no variables yet: they are made under this scope when the model builds
    return;
  }
  if (strategy_)
    throw ValueError(std::string("Model::") + what + ": the model was made in the scope of one " + strategy_->name() +
                     " and is now used in the scope of another " + open->name() +
                     "; mixing different strategies is not supported. Make the model inside the scope of the "
                     "strategy that trains it, or call model.distribute(strategy)");
  const std::vector<Variable> vars = variables();
  throw ValueError(std::string("Model::") + what + ": variable '" + (vars.empty() ? std::string("?") : vars[0].name()) +
                   "' was not created in the distribution strategy scope of " + open->name() +
                   ". It is most likely because some layers, model, or optimizer was being created outside the "
                   "distribution strategy scope. Make sure your code looks similar to the following:\n"
                   "  auto scope = strategy.scope();\n  auto model = make_model();\n  model.compile(...);\n"
                   "or call model.distribute(strategy) to mirror a model made outside the scope");
}

void Model::take_optimizer(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, bool auto_scale_loss) {
  LOCKSTEP_CHECK(optimizer && loss, "Model::compile: an optimizer and a loss are required");
  check_strategy_scope("compile");
  // float16 gradients underflow without loss scaling (bfloat16 has float32's range and needs none).
  if (auto_scale_loss && mixed_precision::global_policy().name() == "mixed_float16" &&
      !dynamic_cast<optimizers::LossScaleOptimizer*>(optimizer.get()))
    optimizer = optimizers::LossScale(std::move(optimizer));
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  reset_step_jits();  // new step functions (the train step's graphs update the old optimizer's slots)
  // Keras' rule: the layers' trainable settings take effect at compile.
  compiled_trainable_.clear();
  for (const auto& l : layers_) compiled_trainable_.emplace_back(l, l->trainable());
  compiled_at_trainable_ = layers::Layer::trainable_changes();
  metrics_.clear();
  output_losses_.clear();
  output_loss_trackers_.clear();
}

std::vector<metrics::MetricPtr> Model::made_metrics(std::vector<MetricArg> given, const std::string& loss_name) {
  std::vector<metrics::MetricPtr> made;
  for (auto& g : given)
    made.push_back(std::holds_alternative<std::string>(g) ? metrics::get(std::get<std::string>(g), loss_name)
                                                          : std::move(std::get<metrics::MetricPtr>(g)));
  return made;
}

void Model::add_metric(metrics::MetricPtr metric, std::size_t k, bool weighted, std::set<std::string>& taken,
                       const char* what) {
  LOCKSTEP_CHECK(metric != nullptr, "Model::", what, ": a metric is null");
  const std::string prefix = outputs_.size() > 1 ? outputs_.names[k] + "_" : "";
  std::string logged = prefix + metric->name();
  // Keras' name for a weighted metric whose key an earlier metric (or a loss) took.
  if (weighted && taken.count(logged)) logged = prefix + "weighted_" + metric->name();
  LOCKSTEP_CHECK(taken.insert(logged).second, "Model::", what, ": two metrics are logged as '", logged,
                 "'; give each metric its own name");
  for (const auto& held : metrics_) {
    if (held.metric != metric) continue;
    // The object compile's metrics hold already keeps its state apart (a weighted one of its own).
    LOCKSTEP_CHECK(weighted, "Model::", what, ": the metric object '", metric->name(),
                   "' is given twice; give each output its own object (it holds one output's state)");
    metric = metric->clone_empty();
    break;
  }
  metrics_.push_back({.metric = std::move(metric), .output = k, .weighted = weighted, .log_name = std::move(logged)});
}

void Model::compile(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, std::vector<std::string> metric_names,
                    bool auto_scale_loss) {
  LOCKSTEP_CHECK(loss != nullptr, "Model::compile: an optimizer and a loss are required");
  compile_metrics(std::move(optimizer), std::move(loss), metric_args(std::move(metric_names)), auto_scale_loss);
}

void Model::compile_metrics(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, std::vector<MetricArg> given,
                            bool auto_scale_loss) {
  // Each name is made as Keras' compile makes it, by the loss ("accuracy" by the loss).
  std::vector<metrics::MetricPtr> metrics = made_metrics(std::move(given), loss ? loss->name() : "");
  LOCKSTEP_CHECK(outputs_.size() <= 1 || metrics.empty(), "Model::compile: model '", name(), "' has ",
                 outputs_.size(), " outputs (", outputs_.joined(),
                 "): give metrics per output, by name (compile(optimizer, losses, metrics))");
  std::set<std::string> names{"loss"};
  for (const auto& m : metrics) {
    LOCKSTEP_CHECK(m != nullptr, "Model::compile: a metric is null");
    LOCKSTEP_CHECK(names.insert(m->name()).second, "Model::compile: two metrics (or a metric and the loss) are named '",
                   m->name(), "'; give each metric its own name");
  }
  if (outputs_.size() > 1) {  // Keras: one loss applies to every output (metrics must say which output they read)
    compile(std::move(optimizer), {{"", std::move(loss)}}, {}, {}, auto_scale_loss);
    return;
  }
  take_optimizer(std::move(optimizer), std::move(loss), auto_scale_loss);
  std::set<std::string> taken{"loss"};
  for (auto& m : metrics) add_metric(std::move(m), 0, /*weighted=*/false, taken, "compile");
}

void Model::compile(optimizers::OptimizerPtr optimizer, const std::map<std::string, losses::LossPtr>& losses,
                    const std::map<std::string, std::vector<std::string>>& metric_names,
                    const std::map<std::string, double>& loss_weights, bool auto_scale_loss) {
  std::map<std::string, std::vector<MetricArg>> args;
  for (const auto& [out, names] : metric_names) args[out] = metric_args(names);
  compile_outputs(std::move(optimizer), losses, std::move(args), loss_weights, auto_scale_loss);
}

void Model::compile_outputs(optimizers::OptimizerPtr optimizer, const std::map<std::string, losses::LossPtr>& losses,
                            std::map<std::string, std::vector<MetricArg>> given,
                            const std::map<std::string, double>& loss_weights, bool auto_scale_loss) {
  // Each name is made as Keras' compile makes it, by its output's loss ("accuracy" by the loss).
  std::map<std::string, std::vector<metrics::MetricPtr>> metric_objects;
  for (auto& [out, list] : given) {
    const auto loss = losses.contains(out) ? losses.find(out) : losses.find("");
    const std::string loss_name = loss != losses.end() && loss->second ? loss->second->name() : "";
    metric_objects[out] = made_metrics(std::move(list), loss_name);
  }
  const auto one = losses.find("");
  LOCKSTEP_CHECK(one == losses.end() || losses.size() == 1, "Model::compile: a loss under \"\" applies to every output; "
                 "give either it alone or one loss per output");
  std::vector<OutputLoss> heads;
  for (const auto& [key, loss] : losses) {
    LOCKSTEP_CHECK(loss != nullptr, "Model::compile: the loss of output '", key, "' is null");
    if (!key.empty()) outputs_.index_of(key, "output");  // names a wrong key
  }
  for (const auto& key : loss_weights) {
    outputs_.index_of(key.first, "output");
    LOCKSTEP_CHECK(std::isfinite(key.second) && key.second >= 0, "Model::compile: loss_weights['", key.first,
                   "'] must be a finite number >= 0, got ", key.second);
  }
  for (const auto& [key, list] : metric_objects) {
    outputs_.index_of(key, "output");
    for (const auto& m : list) LOCKSTEP_CHECK(m != nullptr, "Model::compile: a metric of output '", key, "' is null");
  }
  for (const auto& out : outputs_.names) {
    const auto it = one != losses.end() ? one : losses.find(out);
    LOCKSTEP_CHECK(it != losses.end(), "Model::compile: output '", out, "' has no loss; the losses must name every "
                   "output (", outputs_.joined(), "), or give one loss for all");
    const auto w = loss_weights.find(out);
    heads.push_back({out, it->second, w == loss_weights.end() ? 1.0 : w->second});
  }
  if (outputs_.size() == 1) {  // a model of one output: its plain logs ("loss", "accuracy")
    const auto m = metric_objects.find(outputs_.names.front());
    LOCKSTEP_CHECK(loss_weights.empty(), "Model::compile: loss_weights are for a model of several outputs");
    compile_metrics(std::move(optimizer), heads.front().loss,
                    m == metric_objects.end() ? std::vector<MetricArg>{} : metric_args(std::move(m->second)),
                    auto_scale_loss);
    return;
  }
  take_optimizer(std::move(optimizer), heads.front().loss, auto_scale_loss);
  output_losses_ = std::move(heads);
  std::set<std::string> taken;  // the metrics' keys ("<output>_<name>")
  for (std::size_t k = 0; k < output_losses_.size(); ++k) {
    const std::string& out = output_losses_[k].name;
    output_loss_trackers_.emplace_back(out + "_loss");
    const auto m = metric_objects.find(out);
    if (m == metric_objects.end()) continue;
    for (auto& metric : m->second) add_metric(std::move(metric), k, /*weighted=*/false, taken, "compile");
  }
}

void Model::add_weighted_metrics(const std::vector<std::string>& names, const std::string& output) {
  add_weighted(metric_args(names), output);
}

void Model::add_weighted(std::vector<MetricArg> given, const std::string& output) {
  check_compiled("add_weighted_metrics");
  const std::size_t k = output.empty() ? 0 : outputs_.index_of(output, "output");
  const losses::LossPtr& loss = output_losses_.empty() ? loss_ : output_losses_[k].loss;
  std::vector<metrics::MetricPtr> metrics = made_metrics(std::move(given), loss->name());
  LOCKSTEP_CHECK(!output.empty() || outputs_.size() == 1, "Model::add_weighted_metrics: model '", name(), "' has ",
                 outputs_.size(), " outputs (", outputs_.joined(), "): name the output the metrics read");
  std::set<std::string> taken{"loss"};  // every key of the logs
  for (const auto& t : output_loss_trackers_) taken.insert(t.name());
  for (const auto& m : metrics_) taken.insert(m.log_name);
  for (auto& m : metrics) add_metric(std::move(m), k, /*weighted=*/true, taken, "add_weighted_metrics");
}

void Model::compile(const std::string& optimizer, const std::string& loss, std::vector<std::string> metric_names) {
  compile(optimizers::get(optimizer, 0.001), losses::get(loss), std::move(metric_names));
}

void Model::check_compiled(const char* what) const {
  LOCKSTEP_CHECK(compiled(), "Model::", what, ": the model must be compiled first (call compile())");
}

void Model::add_layer(layers::LayerPtr layer) {
  layer_list_.push_back(std::move(layer));
  layers_changed_ = true;
}

void Model::set_layers(std::vector<layers::LayerPtr> layers) {
  layer_list_ = std::move(layers);
  layers_changed_ = true;
}

template <typename F>
void Model::for_each_variable(F&& f) const {
  // A layer owns its variables alone and is listed once (layers()), so each variable comes once.
  for (const auto& l : layers_)
    for (const auto& v : l->variables()) f(v);
}

std::vector<Variable> Model::variables() const {
  std::vector<Variable> out;
  for_each_variable([&](const Variable& v) { out.push_back(v); });
  return out;
}

std::vector<Variable> Model::trainable_variables() const {
  std::vector<Variable> out;
  for_each_variable([&](const Variable& v) {
    if (v.trainable()) out.push_back(v);
  });
  return out;
}

std::vector<Variable> Model::non_trainable_variables() const {
  std::vector<Variable> out;
  for_each_variable([&](const Variable& v) {
    if (!v.trainable()) out.push_back(v);
  });
  return out;
}

void Model::set_trainable(bool trainable) {
  trainable_ = trainable;
  for (const auto& l : layers_) l->set_trainable(trainable);
}

void Model::check_trainable_as_compiled() {
  const std::uint64_t changes = layers::Layer::trainable_changes();
  if (changes == compiled_at_trainable_) return;
  for (const auto& [held, was] : compiled_trainable_) {
    const auto layer = held.lock();
    if (layer && layer->trainable() != was)
      throw ValueError("Model '" + name() + "': layer '" + layer->name() + "' was set trainable = " +
                       (was ? "false" : "true") + " after compile(); fit trains the weights that were trainable "
                       "at compile (Keras' rule), so call compile() again for the change to take effect");
  }
  compiled_at_trainable_ = changes;  // another model's layers moved the count
}

std::int64_t Model::count_params() const {
  std::int64_t n = 0;
  for_each_variable([&](const Variable& v) { n += v.shape().numel(); });
  return n;
}

Tensor Model::operator()(const Tensor& x) const { return call_where_variables_are(x, layers::CallContext{}).output; }

Model::Output Model::call_where_variables_are(const Tensor& x, const layers::CallContext& ctx) const {
  const std::vector<Variable> vars = variables();
  const Device here = context_device(current_compute_context());
  const auto forward_here = [&](const Tensor& in) {
    Output o = forward(input_of(in), ctx);
    return Output{.output = o.output, .mask = o.mask};
  };
  if (current_replica()) {
    for (const auto& v : vars) check_made_in_scope(v, "Model '" + name() + "'", /*for_update=*/false);
    return forward_here(x.device().kind == here.kind ? x : x.to(here));
  }
  if (!strategy_ || vars.empty() || vars[0].value().device().kind == here.kind) return forward_here(x);
  Output out;
  {
    ComputeContext& first = strategy_->context(0);
    const ComputeScope scope(first);
    const Device& at = context_device(first);
    out = forward_here(x.device() == at ? x : x.to(at));
  }
  return Output{.output = out.output.to(here), .mask = out.mask.defined() ? out.mask.to(here) : Tensor()};
}

Tensor Model::operator()(const Tensor& x, const layers::CallContext& given) const {
  return call_with_mask(x, given).output;
}

Model::Output Model::call_with_mask(const Tensor& x, const layers::CallContext& given) const {
  layers::CallContext ctx = given;
  if (!ctx.replica) ctx.replica = current_replica();
  if (ctx.seed == 0) ctx.seed = seed_;
  if (ctx.training && ctx.step == 0 && ctx.first_example == 0) {
    if (ctx.replica) {
      ctx.step = ctx.replica->step_index();
      ctx.first_example = ctx.replica->first_example();
    } else {
      ctx.step = training_calls_.fetch_add(1);
    }
  }
  return call_where_variables_are(x, ctx);
}

void Model::reset_metrics() {
  loss_tracker_.reset_state();
  for (auto& t : output_loss_trackers_) t.reset_state();
  for (auto& m : metrics_) m.metric->reset_state();
}

std::map<std::string, std::vector<double>> Model::metric_states() const {
  std::map<std::string, std::vector<double>> out;
  out["loss"] = loss_tracker_.state();
  for (const auto& t : output_loss_trackers_) out[t.name()] = t.state();
  for (const auto& m : metrics_) out[m.log_name] = m.metric->state();
  return out;
}

void Model::set_metric_states(const std::map<std::string, std::vector<double>>& states) {
  auto set = [&](metrics::Metric& m, const std::string& logged) {
    auto it = states.find(logged);
    if (it != states.end() && it->second.size() == m.state().size()) m.state() = it->second;
  };
  set(loss_tracker_, loss_tracker_.name());
  for (auto& t : output_loss_trackers_) set(t, t.name());
  for (auto& m : metrics_) set(*m.metric, m.log_name);
}

Logs Model::collect_logs(const char* prefix) const {
  Logs logs;
  collect_logs_into(logs, prefix);
  return logs;
}

void Model::collect_logs_into(Logs& logs, const char* prefix) const {
  static const std::string kLoss = "loss";
  std::string key;  // prefix + name, under a prefix only
  const auto put = [&](const std::string& name, double value) {
    const std::string& k = *prefix ? key.assign(prefix).append(name) : name;
    if (const auto it = logs.find(k); it != logs.end()) it->second = value;
    else logs.emplace(k, value);
  };
  put(kLoss, loss_tracker_.result());
  for (const auto& t : output_loss_trackers_) put(t.name(), t.result());
  for (const auto& m : metrics_) put(m.log_name, m.metric->result());
}

std::vector<Model::Output> Model::forward_all(std::span<const Tensor> xs, const layers::CallContext& ctx) const {
  LOCKSTEP_CHECK(xs.size() == 1, "Model '", name(), "' takes one input, not ", xs.size());
  return {forward(xs.front(), ctx)};
}

void Model::check_components(std::size_t components, const char* what, bool targets) const {
  const std::size_t want = inputs_.size() + (targets ? outputs_.size() : 0);
  // Sample weights after the targets (sample_weights.hpp): one for every output, or one per output.
  if (components == want || (targets && (components == want + 1 || components == want + outputs_.size()))) return;
  std::string names = inputs_.size() == 1 ? "x" : "inputs " + inputs_.joined();
  if (targets) names += outputs_.size() == 1 ? ", y" : ", then targets " + outputs_.joined();
  std::string weights;
  if (targets && outputs_.size() == 1) weights = " (or " + std::to_string(want + 1) + " with sample_weight)";
  if (targets && outputs_.size() > 1)
    weights = " (or " + std::to_string(want + 1) + " with one sample_weight, " +
              std::to_string(want + outputs_.size()) + " with one per output)";
  throw ValueError(std::string(what) + ": model '" + name() + "' takes " + std::to_string(inputs_.size()) + " input(s)" +
                   (targets ? " and " + std::to_string(outputs_.size()) + " target(s)" : std::string()) +
                   ", so each element must hold " + std::to_string(want) + " tensors (" + names + "), got " +
                   std::to_string(components) + weights);
}

Tensor Model::sample_weight_of(const data::Element& s, std::size_t k) const {
  const std::size_t at = inputs_.size() + outputs_.size();
  if (s.size() <= at) return Tensor();
  return s.size() == at + 1 ? s[at] : s[at + k];
}

void Model::refresh_step_variables() {
  // The count is read before the walk: weights made during it are walked again next time.
  const std::uint64_t made = layers::Layer::weights_made();
  const std::uint64_t flips = layers::Layer::trainable_changes();
  if (!layers_changed_ && made == walked_at_weights_ && flips == walked_at_trainable_) return;
  layers_changed_ = false;
  walked_at_weights_ = made;
  walked_at_trainable_ = flips;
  // Another model's weights (or layers' settings) move the counts too: the step functions stay
  // unless this walk differs, in the variables or in which of them train (a layer frozen).
  std::vector<Variable> walked = variables();
  std::vector<Variable> trainable;
  for (const auto& v : walked)
    if (v.trainable()) trainable.push_back(v);
  const auto same = [](const std::vector<Variable>& a, const std::vector<Variable>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](const Variable& x, const Variable& y) { return x.is_same(y); });
  };
  if (same(walked, step_variables_) && same(trainable, step_trainable_)) return;
  step_variables_ = std::move(walked);
  step_trainable_ = std::move(trainable);
  reset_step_jits();
}

void Model::ensure_mirrored() {
  refresh_step_variables();
  if (!strategy_) return;
  check_strategy_alive();
  // A copy of each variable per local replica, on its device. One local replica (alone, or one
  // per worker) keeps its variables unmirrored, on its device: a GPU's replica takes them from
  // the host where they were built; a CPU's leaves them where they are (all logical CPU devices
  // share the host's memory).
  const int local = strategy_->num_local_replicas();
  const Device& device = context_device(*strategy_->contexts().front());
  const std::vector<Variable>& vars = step_variables_;
  bool caught_up = !optimizer_;
  const auto mirror = [&](Variable& v) {
    // Replayed steps may have moved the optimizer's count and loss scale on the device alone; its
    // step blocks, mirrored at the next step, take the host's record: iterations() reads it first.
    if (!caught_up) (void)optimizer_->iterations();
    caught_up = true;
    v.mirror(strategy_->contexts());
  };
  for (auto v : vars) {
    if (local > 1) {
      if (v.num_copies() != local) mirror(v);
      continue;
    }
    const Device& at = v.value().device();
    if (at != device && !(at.kind == DeviceKind::kCpu && device.kind == DeviceKind::kCpu)) mirror(v);
  }
  // Several workers start from the chief's variables (its initial or restored weights): the
  // same seed would give the same ones, but a worker need not have built them alike.
  if (strategy_->num_workers() > 1 && synced_workers_ != strategy_) {
    std::vector<std::vector<Tensor>> copies;
    for (const auto& v : vars) {
      std::vector<Tensor> mine;
      for (int r = 0; r < v.num_copies(); ++r) mine.push_back(v.copy(r));
      copies.push_back(std::move(mine));
    }
    strategy_->broadcast_from_chief(copies);
    synced_workers_ = strategy_;
  }
}

void Model::gather_optimizer_slots() {
  if (strategy_ && optimizer_) strategy_->gather_sharded_slots(optimizer_->elementwise_rule());
}

void Model::distribute(distribute::Strategy& strategy) {
  check_strategy_alive();
  if (strategy_ != &strategy) set_jit_compile(jit_compile_);  // other devices: checked again
  set_strategy(&strategy);
  if (built()) ensure_mirrored();
}

void Model::check_workers_start_alike(int first_epoch, std::int64_t skip_batches) {
  // Workers that resumed from different backups (or one from none: --logdir not shared) would
  // run different numbers of steps and meet in mismatched collectives much later.
  const double here[3] = {static_cast<double>(first_epoch), static_cast<double>(skip_batches),
                          static_cast<double>(optimizer_->iterations())};
  std::vector<Tensor> mine;
  for (int r = 0; r < strategy_->num_local_replicas(); ++r)
    mine.push_back(Tensor::from_vector(std::vector<float>{static_cast<float>(here[0]), static_cast<float>(here[1]),
                                                         static_cast<float>(here[2])},
                                       {3}));
  const distribute::PerReplica<Tensor> values(std::move(mine));
  const auto hi = strategy_->reduce(ReduceOp::kMax, values).to_vector<float>();
  const auto lo = strategy_->reduce(ReduceOp::kMin, values).to_vector<float>();
  LOCKSTEP_CHECK_T(DistributedError, hi == lo, "fit: the workers do not start at the same point: this worker (",
                   strategy_->worker_index(), ") starts at epoch ", first_epoch + 1, ", batch ", skip_batches, ", step ",
                   optimizer_->iterations(), ", others elsewhere (steps ", lo[2], " to ", hi[2],
                   "); every worker must read the same backup (put --logdir on a shared filesystem)");
}

}  // namespace lockstep