#include "lockstep/training/model.hpp"

#include <cstdlib>
#include <string>

#include "core/env.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/training/preprocessing.hpp"
#include "training/replica_slices.hpp"

namespace lockstep {
namespace {
using detail::ReplicaNumbers;
using detail::run_on_slices;

Tensor as_float(const Tensor& t) { return t.dtype() == DType::kF32 ? t : t.to(DType::kF32); }

void check_same_rows(const Tensor& x, const Tensor& y) {
  LOCKSTEP_CHECK(x.rank() >= 1 && y.rank() >= 1 && y.dim(0) == x.dim(0), "train_step: x ", x.shape().str(), " and y ",
                 y.shape().str(), " have different batch sizes");
}

}  // namespace

void Model::merge_replica_numbers(const distribute::PerReplica<ReplicaNumbers>& parts, std::int64_t examples,
                                  double* mean_loss) {
  // A replica's numbers: its loss sum (when the batch had examples) and each metric's state.
  const auto numbers = [&](const ReplicaNumbers& p) {
    std::vector<Tensor> pieces;
    if (examples) pieces.push_back(as_float(p.loss_sum).reshape({1}));
    for (const Tensor& t : p.metric_states) pieces.push_back(t);
    return pieces;
  };
  std::vector<Tensor> totals = numbers(parts[0]);
  if (totals.empty()) {
    if (mean_loss) *mean_loss = 0.0;
    return;
  }
  if (strategy_) {
    // Each replica's numbers travel as one vector, so a step costs one cross-replica
    // reduction, not one per number: across workers each is a collective round trip
    // (element-wise sums, so the result is what separate reductions gave). Without a
    // strategy there is nothing to reduce and the numbers are used as they are.
    std::vector<Tensor> packed;
    for (const ReplicaNumbers& p : parts.values()) {
      std::vector<Tensor> pieces = numbers(p);
      for (Tensor& t : pieces) t = t.reshape({t.numel()});
      packed.push_back(pieces.size() == 1 ? pieces[0] : concat(pieces, 0));
    }
    const Tensor total = strategy_->reduce(ReduceOp::kSum, distribute::PerReplica<Tensor>(std::move(packed)));
    std::int64_t at = 0;
    for (Tensor& t : totals) {
      const Shape shape = t.shape();
      t = total.slice(at, at + t.numel()).reshape(shape);
      at += shape.numel();
    }
  }
  std::size_t i = 0;
  const double loss_sum = examples ? static_cast<double>(totals[i++].item()) : 0.0;
  for (std::size_t m = 0; m < metrics_.size(); ++m) metrics_[m]->merge_state(totals[i++]);
  const double batch_loss = examples ? loss_sum / static_cast<double>(examples) : 0.0;
  if (examples) loss_tracker_.update(batch_loss, static_cast<double>(examples));
  if (mean_loss) *mean_loss = batch_loss;
}

Model::Model(std::string name)
    : seed_(random_seed()), name_(std::move(name)), strategy_(distribute::Strategy::current()) {}
Model::~Model() = default;

Tensor Model::input_of(const Tensor& x) const {
  // Integer pixels go to a model that scales its own input as they are: its Rescaling casts and
  // scales them in one pass (cast_and_scale), the same floats as casting here first.
  if (!is_floating(x.dtype()) && rescales_its_input(*this)) return x;
  return as_float(x);
}

Tensor Model::as_float32(const Tensor& t) {
  return is_floating(t.dtype()) && t.dtype() != DType::kF32 ? cast(t, DType::kF32) : t;
}

void Model::set_seed(std::uint64_t seed) {
  LOCKSTEP_CHECK(!built(), "Model::set_seed must be called before the model is built");
  seed_ = seed;
}

void Model::check_strategy_scope(const char* what) {
  distribute::Strategy* open = distribute::Strategy::current();
  if (!open || open == strategy_) return;
  if (!strategy_ && !built()) {
    strategy_ = open;  // no variables yet: they are made under this scope when the model builds
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

void Model::compile(optimizers::OptimizerPtr optimizer, losses::LossPtr loss, std::vector<std::string> metric_names,
                    bool auto_scale_loss) {
  LOCKSTEP_CHECK(optimizer && loss, "Model::compile: an optimizer and a loss are required");
  check_strategy_scope("compile");
  // float16 gradients underflow without loss scaling (bfloat16 has float32's range and needs none).
  if (auto_scale_loss && mixed_precision::global_policy().name() == "mixed_float16" &&
      !dynamic_cast<optimizers::LossScaleOptimizer*>(optimizer.get()))
    optimizer = optimizers::LossScale(std::move(optimizer));
  optimizer_ = std::move(optimizer);
  loss_ = std::move(loss);
  metrics_.clear();
  for (const auto& m : metric_names) metrics_.push_back(metrics::get(m, loss_->name()));
}

void Model::compile(const std::string& optimizer, const std::string& loss, std::vector<std::string> metric_names) {
  compile(optimizers::get(optimizer, 0.001), losses::get(loss), std::move(metric_names));
}

void Model::check_compiled(const char* what) const {
  LOCKSTEP_CHECK(compiled(), "Model::", what, ": the model must be compiled first (call compile())");
}

std::vector<Variable> Model::trainable_variables() const {
  std::vector<Variable> out;
  for (const auto& v : variables())
    if (v.trainable()) out.push_back(v);
  return out;
}

std::int64_t Model::count_params() const {
  std::int64_t n = 0;
  for (const auto& v : variables()) n += v.shape().numel();
  return n;
}

Tensor Model::operator()(const Tensor& x) const { return forward(input_of(x), layers::CallContext{}).output; }

Tensor Model::operator()(const Tensor& x, const layers::CallContext& given) const {
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
  return forward(input_of(x), ctx).output;
}

void Model::reset_metrics() {
  loss_tracker_.reset_state();
  for (auto& m : metrics_) m->reset_state();
}

std::map<std::string, std::vector<double>> Model::metric_states() const {
  std::map<std::string, std::vector<double>> out;
  out["loss"] = loss_tracker_.state();
  for (const auto& m : metrics_) out[m->name()] = m->state();
  return out;
}

void Model::set_metric_states(const std::map<std::string, std::vector<double>>& states) {
  auto set = [&](metrics::Metric& m) {
    auto it = states.find(m.name());
    if (it != states.end() && it->second.size() == m.state().size()) m.state() = it->second;
  };
  set(loss_tracker_);
  for (auto& m : metrics_) set(*m);
}

Logs Model::collect_logs(const char* prefix) const {
  Logs logs;
  logs[std::string(prefix) + "loss"] = loss_tracker_.result();
  for (const auto& m : metrics_) logs[prefix + m->name()] = m->result();
  return logs;
}

detail::ReplicaNumbers Model::replica_train_step(const Tensor& x, const Tensor& y, std::int64_t first_example,
                                        std::int64_t global_n, std::int64_t step, ReplicaInterface* replica,
                                        GradientUse use) {
  const auto vars = trainable_variables();  // each replica resolves them to its own copies
  const layers::CallContext ctx{.training = true,
                                .seed = seed_,
                                .step = static_cast<std::uint64_t>(step),
                                .first_example = first_example,
                                .replica = replica};
  const auto* loss_scale = dynamic_cast<const optimizers::LossScaleOptimizer*>(optimizer_.get());
  Output out;
  Tensor loss_sum;
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    out = forward(x, ctx);
    loss_sum = sum(loss_->per_example(y, out.output, out.logits));
    // Every replica divides by the GLOBAL batch size, so the summed gradients are the mean
    // over the global batch whatever the split: N replicas compute what one device would.
    const double factor =
        (global_n ? 1.0 / static_cast<double>(global_n) : 0.0) * (loss_scale ? loss_scale->loss_scale() : 1.0);
    // Each gradient bucket's exchange starts as soon as the backward pass has made its last
    // gradient final, while the pass goes on (not when gradients are accumulated first).
    const GradientReadyFn on_ready =
        replica && use == GradientUse::kApply
            ? replica->begin_gradient_exchange(vars, optimizer_->elementwise_rule())
            : GradientReadyFn();
    grads = tape.gradient(scale(loss_sum, static_cast<float>(factor)), vars, Tensor(), on_ready);
  }
  ReplicaNumbers r{.loss_sum = loss_sum};
  for (const auto& m : metrics_) r.metric_states.push_back(m->batch_state(y, out.output));
  if (use == GradientUse::kHoldBack) {
    accumulated_.add(grads, vars);
    return r;
  }
  if (use == GradientUse::kApplyGroup) grads = accumulated_.take(grads, vars);
  if (replica && !loss_scale) {
    // Summed over the replicas and applied, sharded over them where the strategy allows.
    optimizer_->apply_gradients_in_replica(*replica, grads, vars, step);
    return r;
  }
  if (replica) replica->all_reduce_gradients(grads, vars);
  // The sums are identical on every replica, so every replica makes the same decision: the
  // all-reduce already carried any replica's inf or NaN to all of them.
  if (loss_scale && !loss_scale->unscale(grads)) {
    r.gradients_finite = false;
    return r;
  }
  std::vector<std::pair<Tensor, Variable>> gv;
  gv.reserve(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
  optimizer_->apply_gradients_at(gv, step);
  return r;
}

void Model::ensure_mirrored() {
  if (!strategy_) return;
  // A copy of each variable per local replica, on its device. One local replica (alone, or one
  // per worker) keeps its variables unmirrored, on its device: a GPU's replica takes them from
  // the host where they were built; a CPU's leaves them where they are (all logical CPU devices
  // share the host's memory).
  const int local = strategy_->num_local_replicas();
  const Device& device = context_device(*strategy_->contexts().front());
  const std::vector<Variable> vars = variables();
  for (auto v : vars) {
    if (local > 1) {
      if (v.num_copies() != local) v.mirror(strategy_->contexts());
      continue;
    }
    const Device& at = v.value().device();
    if (at != device && !(at.kind == DeviceKind::kCpu && device.kind == DeviceKind::kCpu))
      v.mirror(strategy_->contexts());
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
  strategy_ = &strategy;
  if (built()) ensure_mirrored();
}

double Model::train_step(const Tensor& x, const Tensor& y) {
  check_compiled("train_step");
  check_same_rows(x, y);
  return train_micro_step(detail::split_batch(strategy_, {x, y}), 0, x.rank() >= 1 ? x.dim(0) : 0,
                          GradientUse::kApply);
}

double Model::train_micro_step(const distribute::DistributedBatch& batch, std::int64_t first_example,
                               std::int64_t group_examples, GradientUse use) {
  check_compiled("train_step");
  // Tensors are checked here; a batch of rows comes from one table of rows, so its components
  // agree. Each replica casts its own slice (on its device, after the copy: fewer bytes).
  if (const data::Element* t = batch.global->tensors()) check_same_rows((*t)[0], (*t)[1]);
  if (!built()) build(batch.global->shape(0));
  ensure_mirrored();
  const std::int64_t n = batch.global_size;
  const std::int64_t step = optimizer_->iterations();
  const auto parts = run_on_slices(strategy_, batch, [&](const data::Element& s, std::int64_t first, ReplicaInterface* rc) {
    return replica_train_step(input_of(s[0]), s[1], first_example + first, group_examples, step, rc, use);
  });
  if (use == GradientUse::kHoldBack) {
    double batch_loss = 0;
    merge_replica_numbers(parts, n, &batch_loss);
    return batch_loss;
  }
  const bool applied = parts[0].gradients_finite;
  if (auto* loss_scale = dynamic_cast<optimizers::LossScaleOptimizer*>(optimizer_.get()))
    loss_scale->update_scale(applied);
  if (applied) optimizer_->finish_step();
  // Debug check (LOCKSTEP_CHECK_MIRRORED=1): every replica's copy of every variable is still
  // bit-identical after the update; throws DistributedError naming the first that drifted.
  static const bool check_mirrored = [] {
    return env::flag("LOCKSTEP_CHECK_MIRRORED");
  }();
  if (check_mirrored && strategy_) strategy_->check_mirrored(variables());
  // Losses and metrics are reduced across replicas before anyone sees them.
  double batch_loss = 0;
  merge_replica_numbers(parts, n, &batch_loss);
  return batch_loss;
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

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  auto [train, val] = split_xy(x, y, options);
  FitOptions o = options;
  if (val && !o.validation_data) o.validation_data = *val;
  o.validation_split = 0.0;
  return fit(train, o);
}
History Model::fit(const data::Dataset& dataset, const FitOptions& o) {
  check_compiled("fit");
  check_strategy_scope("fit");
  LOCKSTEP_CHECK(o.epochs >= 0, "fit: epochs must be >= 0, got ", o.epochs);
  LOCKSTEP_CHECK(o.initial_epoch >= 0 && o.initial_epoch <= o.epochs, "fit: initial_epoch ", o.initial_epoch,
                 " must be in [0, epochs = ", o.epochs, "]");
  LOCKSTEP_CHECK(o.steps_per_epoch == -1 || o.steps_per_epoch > 0, "fit: steps_per_epoch must be positive or -1");
  LOCKSTEP_CHECK(o.validation_split == 0.0, "fit: validation_split needs in-memory tensors (fit(x, y, ...))");
  LOCKSTEP_CHECK(o.gradient_accumulation_steps >= 1, "fit: gradient_accumulation_steps must be >= 1, got ",
                 o.gradient_accumulation_steps);
  const std::int64_t accumulation = o.gradient_accumulation_steps;
  accumulated_.clear();
  const std::int64_t card = dataset.cardinality();
  LOCKSTEP_CHECK(o.steps_per_epoch > 0 || card != data::kInfiniteCardinality,
                 "fit: the dataset is infinite (repeat()), so steps_per_epoch must be given");
  const std::int64_t steps = o.steps_per_epoch > 0 ? o.steps_per_epoch : (card >= 0 ? card : -1);
  // Only the chief of several workers reports progress (and writes files: the callbacks'
  // is_chief options).
  const bool chief = !strategy_ || strategy_->is_chief();
  const int verbose = !chief ? 0 : o.verbose >= 0 ? o.verbose : (isatty(fileno(stdout)) ? 1 : 2);
  CallbackList cbs{o.callbacks};
  if (verbose > 0) cbs.cbs.insert(cbs.cbs.begin(), std::make_shared<ProgbarLogger>());
  const TrainParams params{.epochs = o.epochs, .steps = steps, .verbose = verbose};
  cbs.each([&](Callback& c) {
    c.set_model(this);
    c.set_params(params);
  });
  History history;
  stop_training = false;
  timing_ = FitTiming{};
  // Throughput is timed after the first 5% of all steps (warm-up: caches, allocator).
  const std::int64_t total_steps = steps > 0 ? steps * (o.epochs - o.initial_epoch) : -1;
  const std::int64_t warmup = total_steps > 0 ? std::max<std::int64_t>(1, total_steps / 20) : 1;
  std::int64_t global_step = 0;
  std::chrono::steady_clock::time_point timed_start;
  BackupAndRestore* backup = nullptr;
  for (auto& c : cbs.cbs)
    if (auto* b = dynamic_cast<BackupAndRestore*>(c.get())) backup = b;
  LOCKSTEP_CHECK(!backup || built(), "fit: BackupAndRestore needs a built model (give the first layer an input_dim or "
                                     "call build()) so that a backup can be restored before training starts");
  // The contexts training computes on: the replicas', or the current one without a strategy.
  const std::vector<ComputeContext*> devices =
      strategy_ ? strategy_->contexts() : std::vector<ComputeContext*>{&current_compute_context()};
  // Input pipelines may use only the cores that training does not (data::ThreadBudget).
  int compute_threads = 0;
  for (auto* ctx : devices) compute_threads += context_threads(*ctx);
  const auto compute_lease = data::ThreadBudget::process().reserve_compute(compute_threads);
  // When training keeps every core busy, a pipeline thread gathering the batch would take a
  // core from a replica (and every replica waits for the slowest): the replicas gather their
  // own slices instead, in parallel (FitInput's row batches, where the pipeline has them).
  // Replicas on GPUs take the pipeline's batches (their threads only queue work) and copy the
  // next one to their device while a step runs (run_on_slices), so fit reads one batch ahead.
  bool on_gpus = false;
  for (auto* ctx : devices) on_gpus |= context_device(*ctx).kind != DeviceKind::kCpu;
  const bool gather_in_replicas =
      !on_gpus && data::ThreadBudget::process().compute_reserved() >= data::ThreadBudget::process().cores();
  const auto open_pass = [&] { return std::make_unique<FitInput>(dataset, gather_in_replicas, on_gpus); };
  // The replicas gather the next batch's slices ahead (run_on_slices); LOCKSTEP_GATHER_AHEAD=0
  // turns that off, read per fit so that bench/fit_overhead can compare both in one process.
  // On GPUs the next batch is copied to the devices ahead instead; LOCKSTEP_PREFETCH_TO_DEVICE=0
  // turns that off (for comparisons, and for the GPU test that it changes no result).
  const auto env_on = [](const char* name) {
    return env::flag(name);
  };
  const bool read_ahead = on_gpus ? env_on("LOCKSTEP_PREFETCH_TO_DEVICE") : env_on("LOCKSTEP_GATHER_AHEAD");
  Logs logs;
  cbs.each([&](Callback& c) { c.on_train_begin(logs); });
  // Resuming from a backup: continue at its epoch and batch with the same data order. The
  // shuffle order of a pass depends only on the seed and on how many passes came before,
  // so the passes of the finished epochs are made (and dropped) again, then the batches
  // already trained in the interrupted epoch are skipped.
  int first_epoch = o.initial_epoch;
  std::int64_t skip_batches = 0;
  if (backup && backup->restored_state()) {
    const io::TrainingState& st = *backup->restored_state();
    LOCKSTEP_CHECK(st.seed == seed_, "fit: the backup was made by a model with seed ", st.seed, ", this model has seed ",
                   seed_, "; resume with the same seed");
    LOCKSTEP_CHECK(st.epoch >= o.initial_epoch && st.epoch <= o.epochs, "fit: the backup is at epoch ", st.epoch,
                   ", outside [initial_epoch, epochs] = [", o.initial_epoch, ", ", o.epochs, "]");
    LOCKSTEP_CHECK(steps < 0 || st.batch_in_epoch <= steps, "fit: the backup is at batch ", st.batch_in_epoch,
                   " of epoch ", st.epoch + 1, ", past its ", steps, " steps per epoch");
    first_epoch = st.epoch;
    skip_batches = st.batch_in_epoch;
    if (env::flag("LOCKSTEP_VERBOSE_RESUME") || verbose > 0)
      std::fprintf(stderr, "Resuming from backup: epoch %d, batch %lld, step %lld\n", st.epoch + 1,
                   static_cast<long long>(st.batch_in_epoch), static_cast<long long>(optimizer_->iterations()));
    if (strategy_) {
      ensure_mirrored();  // under several workers: the chief's restored variables
      if (strategy_->num_workers() > 1) {
        // And its restored optimizer slots: each worker's primary copy takes the chief's (the
        // other local replicas' stand-ins are dropped; broadcast_slots fills them below).
        std::vector<std::vector<Tensor>> slots;
        for (const auto& v : trainable_variables()) {
          for (const auto& [name, t] : optimizer_->slots(v)) {
            std::vector<Tensor> copies{t};
            for (int r = 1; r < strategy_->num_local_replicas(); ++r) copies.push_back(t.clone());
            slots.push_back(std::move(copies));
          }
        }
        strategy_->broadcast_from_chief(slots);
      }
      for (const auto& v : trainable_variables()) optimizer_->broadcast_slots(v);
    }
  }
  if (strategy_ && strategy_->num_workers() > 1) check_workers_start_alike(first_epoch, skip_batches);
  // With steps_per_epoch, one iterator runs on across epochs (Keras' EpochIterator). When the
  // dataset's length is known, a pass that has been used up is replaced by a fresh one at the
  // next epoch's start, so steps_per_epoch = the dataset's length is a fresh pass each epoch,
  // and a pass that runs out within an epoch ends that epoch early (with a warning) rather
  // than training.
  std::unique_ptr<FitInput> persistent;
  const bool renew_passes = o.steps_per_epoch > 0 && card >= 0;
  std::int64_t taken_from_pass = 0;  // batches taken from `persistent`'s pass
  if (o.steps_per_epoch > 0) {
    // Replays the epochs before the resumed one to find the pass and the position in it.
    std::int64_t passes_before = 0;
    for (int e = o.initial_epoch; e <= first_epoch; ++e) {
      if (renew_passes && taken_from_pass >= card) {
        ++passes_before;
        taken_from_pass = 0;
      if (e < first_epoch)
        taken_from_pass += renew_passes ? std::min(o.steps_per_epoch, card - taken_from_pass) : o.steps_per_epoch;
    taken_from_pass += skip_batches;
    for (std::int64_t p = 0; p < passes_before; ++p) (void)open_pass();
    persistent = open_pass();
    persistent->skip(taken_from_pass);
  } else {
    for (int e = o.initial_epoch; e < first_epoch; ++e) (void)open_pass();
  for (int epoch = first_epoch; epoch < o.epochs && !stop_training; ++epoch) {
    reset_metrics();
    const std::int64_t first_step = epoch == first_epoch ? skip_batches : 0;
    if (first_step > 0) set_metric_states(resumed_metric_states(*backup->restored_state()));
    cbs.each([&](Callback& c) { c.on_epoch_begin(epoch, logs); });
    // (The replay above already renewed the resumed epoch's pass.)
    if (renew_passes && taken_from_pass >= card && epoch != first_epoch) {
      persistent = open_pass();
      taken_from_pass = 0;
    std::unique_ptr<FitInput> per_epoch;
    FitInput* it = persistent.get();
    if (!it) {
      per_epoch = open_pass();
      it = per_epoch.get();
      it->skip(first_step);
    // Peak memory per device over the epoch: what the epoch line and History report.
    for (auto* d : devices) reset_context_peak_bytes(*d);
    detail::GpuUtilization utilization(devices);
    bool ran_dry = false;
    std::int64_t steps_done = 0;
    // Time spent waiting for input, so that an input-bound run shows itself ("input: 40%").
    double input_seconds = 0;
    const auto epoch_start = std::chrono::steady_clock::now();
    // Each group of batches is read first: with gradient accumulation every batch's loss is
    // divided by all the group's examples, so that k batches give the gradient of one batch k
    // times larger (a short last group included). Without it a group is one batch.
    std::vector<FitBatch> group;
    bool exhausted = false;
    for (std::int64_t step = first_step; !exhausted && !stop_training && (steps < 0 || step < steps);) {
      group.clear();
      const std::int64_t room = steps < 0 ? accumulation : std::min<std::int64_t>(accumulation, steps - step);
      while (static_cast<std::int64_t>(group.size()) < room) {
        const auto wait_start = std::chrono::steady_clock::now();
        std::optional<FitBatch> batch = renew_passes && taken_from_pass >= card ? std::nullopt : it->next();
        input_seconds += seconds_since(wait_start);
        if (!batch) {
          // Batches this epoch has had, a resumed epoch's earlier ones included.
          const std::int64_t had = step + static_cast<std::int64_t>(group.size());
          if (renew_passes && had > 0) {
            warn_pass_ended_epoch(had, o.steps_per_epoch);
            taken_from_pass = card;  // the next epoch starts a fresh pass
          } else if (o.steps_per_epoch > 0) {
            ran_dry = true;
          exhausted = true;
          break;
        ++taken_from_pass;
        LOCKSTEP_CHECK(batch->components() >= 2, "fit: dataset elements must be (x, y) pairs, got ",
                       batch->components(), " component(s)");
        group.push_back(std::move(*batch));
      std::int64_t group_examples = 0;
      for (const auto& b : group) group_examples += b.size();
      // The batch after group[j], where it is known without waiting: the replicas gather it
      // ahead. Not past the epoch's last step (validation comes first) nor into a new pass.
      const auto batch_after = [&](std::size_t j) -> const FitBatch* {
        if (!read_ahead) return nullptr;
        if (j + 1 < group.size()) return &group[j + 1];
        if ((steps >= 0 && step + 1 >= steps) || (renew_passes && taken_from_pass >= card)) return nullptr;
        const FitBatch* peeked = it->peek();  // may wait for the pipeline (elements read ahead)
        return peeked;
      };
      std::int64_t first_example = 0;
      for (std::size_t j = 0; j < group.size() && !stop_training; ++j, ++step) {
        ++steps_done;
        Logs batch_logs;
        cbs.each([&](Callback& c) { c.on_train_batch_begin(step, batch_logs); });
        const GradientUse use = group.size() == 1        ? GradientUse::kApply
                                : j + 1 < group.size() ? GradientUse::kHoldBack
                                                        : GradientUse::kApplyGroup;
        train_micro_step(group[j], first_example, group_examples, use, batch_after(j));
        first_example += group[j].size();
        ++global_step;
        if (global_step == warmup) timed_start = std::chrono::steady_clock::now();
        batch_logs = collect_logs("");
        cbs.each([&](Callback& c) { c.on_train_batch_end(step, batch_logs); });
        utilization.maybe_sample();
    // Training stopped within a group: its held-back gradients are not applied.
    accumulated_.clear();
    if (ran_dry && steps_done == 0) {
      // Nothing ran this epoch: report no epoch rather than one with empty (zero) logs.
      warn_input_ran_out();
      break;
    if (global_step > warmup) {
      timing_.steps = global_step - warmup;
      timing_.seconds = seconds_since(timed_start);
      timing_.steps_per_second = timing_.seconds > 0 ? static_cast<double>(timing_.steps) / timing_.seconds : 0;
    logs = collect_logs("");
    std::uint64_t peak = 0;
    for (auto* d : devices) peak = std::max(peak, context_peak_bytes(*d));
    logs["peak_memory_mib"] = static_cast<double>(peak) / (1024.0 * 1024.0);
    if (const auto u = utilization.take_mean()) logs["gpu_utilization"] = *u;
    if (const auto* ls = dynamic_cast<const optimizers::LossScaleOptimizer*>(optimizer_.get())) {
      logs["loss_scale"] = ls->loss_scale();
      logs["skipped_steps"] = static_cast<double>(ls->skipped_steps());
    const double epoch_seconds = seconds_since(epoch_start);
    if (steps_done > 0 && epoch_seconds > 0) {
      logs["input_wait_share"] = input_seconds / epoch_seconds;
      logs["steps_per_second"] = static_cast<double>(steps_done) / epoch_seconds;
    if (o.validation_data) {
      Logs v = evaluate_impl(*o.validation_data, o.validation_steps, {}, 0);
      for (const auto& [k, val] : v) logs["val_" + k] = val;
    gather_optimizer_slots();  // an epoch-end checkpoint (on the chief alone) finds them whole
    cbs.each([&](Callback& c) { c.on_epoch_end(epoch, logs); });
    history.epoch.push_back(epoch);
    for (const auto& [k, v] : logs) history.history[k].push_back(v);
    if (ran_dry) {
  gather_optimizer_slots();
  cbs.each([&](Callback& c) { c.on_train_end(logs); });
  return history;
Logs Model::evaluate_impl(const data::Dataset& dataset, std::int64_t steps, const std::vector<CallbackPtr>& callbacks,
                          int verbose) {
  check_compiled("evaluate");
  LOCKSTEP_CHECK(steps > 0 || card != data::kInfiniteCardinality,
                 "evaluate: the dataset is infinite (repeat()), so steps must be given");
  CallbackList cbs{callbacks};
  cbs.each([&](Callback& c) { c.set_model(this); });
  reset_metrics();
  cbs.each([&](Callback& c) { c.on_test_begin(logs); });
  auto it = dataset.make_iterator();
  const std::int64_t total = steps > 0 ? steps : card;
  std::unique_ptr<Progbar> bar;
  if (verbose == 1 && (!strategy_ || strategy_->is_chief())) bar = std::make_unique<Progbar>(total);
  std::int64_t examples = 0;
  for (std::int64_t step = 0; steps < 0 || step < steps; ++step) {
    auto batch = it->next();
    if (!batch) break;
    LOCKSTEP_CHECK(batch->size() >= 2, "evaluate: dataset elements must be (x, y) pairs");
    cbs.each([&](Callback& c) { c.on_test_batch_begin(step, logs); });
    const Tensor x = input_of((*batch)[0]);
    const Tensor& y = (*batch)[1];
    LOCKSTEP_CHECK(y.rank() >= 1 && y.dim(0) == x.dim(0), "evaluate: x ", x.shape().str(), " and y ", y.shape().str(),
                   " have different batch sizes");
    if (!built()) build(Shape(x.shape()));
    ensure_mirrored();
    const auto parts = run_on_slices(strategy_, FitBatch({x, y}), [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
      const Output out = forward(s[0], layers::CallContext{.replica = rc});
      ReplicaNumbers r{.loss_sum = sum(loss_->per_example(s[1], out.output, out.logits))};
      for (const auto& m : metrics_) r.metric_states.push_back(m->batch_state(s[1], out.output));
      return r;
    });
    merge_replica_numbers(parts, x.dim(0), nullptr);
    examples += x.dim(0);
    cbs.each([&](Callback& c) { c.on_test_batch_end(step, logs); });
    if (bar) {
      std::vector<std::pair<std::string, double>> vals(logs.begin(), logs.end());
      bar->update(step + 1, vals);
  // Keras refuses this too: the mean of no examples would read as a loss of 0.
  LOCKSTEP_CHECK(examples > 0, "evaluate: the data produced no examples, so there is no loss to report");
  logs = collect_logs("");
  cbs.each([&](Callback& c) { c.on_test_end(logs); });
  return logs;
Logs Model::evaluate(const data::Dataset& dataset, const EvaluateOptions& o) {
  return evaluate_impl(dataset, o.steps, o.callbacks, o.verbose);
Logs Model::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& o) {
  LOCKSTEP_CHECK(x.rank() >= 1 && y.rank() >= 1 && x.dim(0) == y.dim(0), "evaluate: x ", x.shape().str(), " and y ",
                 y.shape().str(), " must have the same number of examples");
  LOCKSTEP_CHECK(o.batch_size > 0, "evaluate: batch_size must be positive");
  return evaluate_impl(data::Dataset::from_tensor_slices(x, y).batch(o.batch_size), o.steps, o.callbacks, o.verbose);
Tensor Model::predict(const data::Dataset& dataset, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.steps > 0 || dataset.cardinality() != data::kInfiniteCardinality,
                 "predict: the dataset is infinite (repeat()), so steps must be given");
  cbs.each([&](Callback& c) { c.on_predict_begin(logs); });
  std::vector<Tensor> outs;
  std::int64_t rows = 0;
  for (std::int64_t step = 0; o.steps < 0 || step < o.steps; ++step) {
    cbs.each([&](Callback& c) { c.on_predict_batch_begin(step, logs); });
    const auto parts = run_on_slices(strategy_, FitBatch({x}), [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
      return forward(s[0], layers::CallContext{.replica = rc}).output;
    outs.push_back(strategy_ ? strategy_->gather(parts) : parts[0]);
    rows += outs.back().dim(0);
    cbs.each([&](Callback& c) { c.on_predict_batch_end(step, logs); });
  cbs.each([&](Callback& c) { c.on_predict_end(logs); });
  LOCKSTEP_CHECK(!outs.empty(), "predict: the input produced no batches");
  return concat(outs, 0);
Tensor Model::predict(const Tensor& x, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.batch_size > 0, "predict: batch_size must be positive");
  return predict(data::Dataset::from_tensor_slices(x).batch(o.batch_size), o);
}  // namespace lockstep
