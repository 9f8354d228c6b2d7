#include "training/fit_loop.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/env.hpp"
#include "distribute/phase_times.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"
#include "lockstep/training/preemption.hpp"
#include "lockstep/training/progbar.hpp"

namespace lockstep::detail {
namespace {

void warn_pass_ended_epoch(std::int64_t steps_done, std::int64_t steps_per_epoch) {
  std::fprintf(stderr,
               "WARNING: the dataset's pass ended after %lld of steps_per_epoch = %lld steps; this epoch ends "
               "here and the next one starts a fresh pass (use repeat() for longer epochs).\n",
               static_cast<long long>(steps_done), static_cast<long long>(steps_per_epoch));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

using distribute::phase_times::LoopPhase;
using distribute::phase_times::LoopScope;

}  // namespace

EpochInput::EpochInput(OpenPass open_pass, const FitOptions& o, std::int64_t cardinality, ResumePoint at)
    : open_pass_(std::move(open_pass)), card_(cardinality), renew_(o.steps_per_epoch > 0 && cardinality >= 0) {
  if (o.steps_per_epoch <= 0) {
    for (int e = o.initial_epoch; e < at.epoch; ++e) (void)open_pass_();
    return;
  }
  // Replays the epochs before the resumed one to find the pass and the position in it.
  std::int64_t passes_before = 0;
  for (int e = o.initial_epoch; e <= at.epoch; ++e) {
    if (renew_ && taken_ >= card_) {
      ++passes_before;
      taken_ = 0;
    }
    if (e < at.epoch) taken_ += renew_ ? std::min(o.steps_per_epoch, card_ - taken_) : o.steps_per_epoch;
  }
  taken_ += at.batch;
  for (std::int64_t p = 0; p < passes_before; ++p) (void)open_pass_();
  persistent_ = open_pass_();
  persistent_->skip(taken_);
}

void EpochInput::begin_epoch(bool resumed, std::int64_t first_step) {
  // (The replay already renewed the resumed epoch's pass.)
  if (renew_ && taken_ >= card_ && !resumed) {
    persistent_ = open_pass_();
    taken_ = 0;
  }
  it_ = persistent_.get();
  if (it_) return;
  per_epoch_.reset();
  per_epoch_ = open_pass_();
  it_ = per_epoch_.get();
  it_->skip(first_step);
}

std::optional<distribute::DistributedBatch> EpochInput::next(bool last_of_epoch) {
  if (used_up()) return std::nullopt;
  const bool last_of_pass = renew_ && taken_ + 1 >= card_;  // the next batch is a new pass's
  std::optional<distribute::DistributedBatch> batch = it_->next(!last_of_epoch && !last_of_pass);
  if (batch) ++taken_;
  return batch;
}

namespace {
void check_options(const FitOptions& o) {
  LOCKSTEP_CHECK(o.epochs >= 0, "fit: epochs must be >= 0, got ", o.epochs);
  LOCKSTEP_CHECK(o.initial_epoch >= 0 && o.initial_epoch <= o.epochs, "fit: initial_epoch ", o.initial_epoch,
                 " must be in [0, epochs = ", o.epochs, "]");
  LOCKSTEP_CHECK(o.steps_per_epoch == -1 || o.steps_per_epoch > 0, "fit: steps_per_epoch must be positive or -1");
  LOCKSTEP_CHECK(o.validation_split == 0.0, "fit: validation_split needs in-memory tensors (fit(x, y, ...))");
  LOCKSTEP_CHECK(o.gradient_accumulation_steps >= 1, "fit: gradient_accumulation_steps must be >= 1, got ",
                 o.gradient_accumulation_steps);
}
}  // namespace

FitLoop::FitLoop(Model& model, const data::Dataset& dataset, const FitOptions& o)
    : model_(model), dataset_(dataset), o_(o), card_(dataset.cardinality()) {
  check_options(o);
  drop_held_back();
  LOCKSTEP_CHECK(o.steps_per_epoch > 0 || card_ != data::kInfiniteCardinality,
                 "fit: the dataset is infinite (repeat()), so steps_per_epoch must be given");
  steps_ = o.steps_per_epoch > 0 ? o.steps_per_epoch : (card_ >= 0 ? card_ : -1);
  distribute::Strategy* strategy = model_.strategy_;
  // Only the chief of several workers reports progress (and writes files: the callbacks'
  // is_chief options).
  const bool chief = !strategy || strategy->is_chief();
  verbose_ = !chief ? 0 : o.verbose >= 0 ? o.verbose : (stdout_redraws() ? 1 : 2);
  callbacks.cbs = o.callbacks;
  if (verbose_ > 0) callbacks.cbs.insert(callbacks.cbs.begin(), std::make_shared<ProgbarLogger>());
  const TrainParams params{.epochs = o.epochs, .steps = steps_, .verbose = verbose_};
  callbacks.each([&](Callback& c) {
    c.set_model(&model_);
    c.set_params(params);
  });
  model_.stop_training = false;
  model_.timing_ = FitTiming{};
  const std::int64_t total_steps = steps_ > 0 ? steps_ * (o.epochs - o.initial_epoch) : -1;
  warmup_ = total_steps > 0 ? std::max<std::int64_t>(1, total_steps / 20) : 1;
  for (auto& c : callbacks.cbs)
    if (auto* b = dynamic_cast<BackupAndRestore*>(c.get())) backup_ = b;
  // Reads wait only where every batch end may come late. Under several workers a read is a
  // collective whose points each worker must choose alike, and their callbacks may differ (the
  // chief's progress bar, TensorBoard): they read every execution's numbers.
  defer_reads_ = o.defer_reads && !env::flag("LOCKSTEP_SYNC_EACH_STEP") && callbacks.all_async_safe() &&
                 (!strategy || strategy->num_workers() == 1);
  LOCKSTEP_CHECK(!backup_ || model_.built(), "fit: BackupAndRestore needs a built model (give the first layer an "
                                             "input_dim or call build()) so that a backup can be restored before "
                                             "training starts");
  choose_input();
}

void FitLoop::choose_input() {
  distribute::Strategy* strategy = model_.strategy_;
  devices_ = strategy ? strategy->contexts() : std::vector<ComputeContext*>{&current_compute_context()};
  // Input pipelines may use only the cores that training does not (data::ThreadBudget).
  int compute_threads = 0;
  for (auto* ctx : devices_) compute_threads += context_threads(*ctx);
  compute_lease_ = data::ThreadBudget::process().reserve_compute(compute_threads);
  // When training keeps every core busy, a pipeline thread gathering the batch would take a
  // core from a replica (and every replica waits for the slowest): the replicas gather their
  // own slices instead, in parallel (row batches, where the pipeline has them: DistributedInputOptions).
  // Replicas on GPUs (their threads only queue work) gather their slices too, as stored, and
  // copy the next one to their device while a step runs, casting it there (DistributedBatch),
  // so fit reads one batch ahead; pipelines without row batches give them whole batches.
  for (auto* ctx : devices_) on_gpus_ |= context_device(*ctx).kind != DeviceKind::kCpu;
  gather_in_replicas_ =
      on_gpus_ || data::ThreadBudget::process().compute_reserved() >= data::ThreadBudget::process().cores();
  // The replicas gather the next batch's slices ahead (DistributedBatch) unless
  // FitOptions::gather_ahead is false (bench/fit_overhead compares both). On GPUs the next batch
  // is copied to the devices ahead instead unless FitOptions::prefetch_to_device is false (for
  // comparisons, and for the GPU test that it changes no result).
  read_ahead_ = on_gpus_ ? o_.prefetch_to_device : o_.gather_ahead;
}

ResumePoint FitLoop::resume() {
  ResumePoint at{.epoch = o_.initial_epoch};
  if (!backup_ || !backup_->restored_state()) return at;
  const io::TrainingState& st = *backup_->restored_state();
  const optimizers::Optimizer& optimizer = *model_.optimizer_;
  LOCKSTEP_CHECK(st.seed == model_.seed_, "fit: the backup was made by a model with seed ", st.seed,
                 ", this model has seed ", model_.seed_, "; resume with the same seed");
  LOCKSTEP_CHECK(st.epoch >= o_.initial_epoch && st.epoch <= o_.epochs, "fit: the backup is at epoch ", st.epoch,
                 ", outside [initial_epoch, epochs] = [", o_.initial_epoch, ", ", o_.epochs, "]");
  LOCKSTEP_CHECK(steps_ < 0 || st.batch_in_epoch <= steps_, "fit: the backup is at batch ", st.batch_in_epoch,
                 " of epoch ", st.epoch + 1, ", past its ", steps_, " steps per epoch");
  at = ResumePoint{.epoch = st.epoch, .batch = st.batch_in_epoch, .state = &st};
  if (env::flag("LOCKSTEP_VERBOSE_RESUME") || verbose_ > 0)
    std::fprintf(stderr, "Resuming from backup: epoch %d, batch %lld, step %lld\n", st.epoch + 1,
                 static_cast<long long>(st.batch_in_epoch), static_cast<long long>(optimizer.iterations()));
  if (model_.strategy_) take_restored_slots();
  return at;
}

void FitLoop::take_restored_slots() {
  distribute::Strategy& strategy = *model_.strategy_;
  optimizers::Optimizer& optimizer = *model_.optimizer_;
  model_.ensure_mirrored();  // under several workers: the chief's restored variables
  if (strategy.num_workers() > 1) {
    // And its restored optimizer slots: each worker's primary copy takes the chief's (the
    // other local replicas' stand-ins are dropped; broadcast_slots fills them below).
    std::vector<std::vector<Tensor>> slots;
    for (const auto& v : model_.trainable_variables()) {
      for (const auto& [name, t] : optimizer.slots(v)) {
        std::vector<Tensor> copies{t};
        for (int r = 1; r < strategy.num_local_replicas(); ++r) copies.push_back(t.clone());
        slots.push_back(std::move(copies));
      }
    }
    strategy.broadcast_from_chief(slots);
  }
  for (const auto& v : model_.trainable_variables()) optimizer.broadcast_slots(v);
}

void FitLoop::drop_held_back() { model_.group_sums().clear(); }

EpochInput FitLoop::open_input(ResumePoint at) const {
  const distribute::Strategy* s = model_.strategy_;
  const int local = s ? s->num_local_replicas() : 1;
  const distribute::DistributedInputOptions input{.replicas = s ? s->num_replicas_in_sync() : 1,
                                                  .first_replica = s ? s->worker_index() * local : 0,
                                                  .local_replicas = local,
                                                  .row_batches = gather_in_replicas_,
                                                  .peek_elements = on_gpus_,
                                                  .read_ahead = read_ahead_,
                                                  .gather_on_worker = o_.gather_ahead,
                                                  .gather_into_staging = o_.gather_into_staging,
                                                  .check_splittable = s != nullptr};
  auto open_pass = [this, input] { return std::make_unique<EpochInput::Iterator>(dataset_, input); };
  return EpochInput(open_pass, o_, card_, at);
}

EpochTally FitLoop::train_epoch(EpochInput& in, bool resumed, std::int64_t first_step) {
  in.begin_epoch(resumed, first_step);
  // Peak memory per device over the epoch: what the epoch line and History report.
  for (auto* d : devices_) reset_context_peak_bytes(*d);
  GpuUtilization utilization(devices_);
  EpochTally tally{.start = std::chrono::steady_clock::now()};
  group_.clear();
  group_at_ = 0;
  input_ended_ = false;
  for (std::int64_t step = first_step; !model_.stop_training && (steps_ < 0 || step < steps_);) {
    const bool more = run_execution(in, step, tally, utilization);
    // A group's end is a step boundary no held-back gradient spans (a backup there is whole).
    if (group_at_ == group_.size()) {
      if (const std::optional<training::AgreedStop> stop = poll_stop()) {
        stop_ = *stop;
        tally.interrupted = true;
        tally.steps_done = step;
        break;
      }
    }
    if (!more) break;
  }
  // The epoch's logs, validation, a backup at a stop and the caller read merged numbers.
  read_pending();
  // Training stopped within a group: its held-back gradients are not applied.
  drop_held_back();
  tally.gpu_utilization = utilization.take_mean();
  return tally;
}

bool FitLoop::read_group(EpochInput& in, std::int64_t step, EpochTally& tally) {
  group_.clear();
  group_at_ = 0;
  first_example_ = 0;
  group_examples_ = 0;
  const std::int64_t accumulation = o_.gradient_accumulation_steps;
  const std::int64_t room = steps_ < 0 ? accumulation : std::min<std::int64_t>(accumulation, steps_ - step);
  while (static_cast<std::int64_t>(group_.size()) < room) {
    const auto wait_start = std::chrono::steady_clock::now();
    const std::int64_t at = step + static_cast<std::int64_t>(group_.size());
    std::optional<distribute::DistributedBatch> batch = in.next(steps_ >= 0 && at + 1 >= steps_);
    tally.input_seconds += seconds_since(wait_start);
    if (!batch) {
      // Batches this epoch has had, a resumed epoch's earlier ones included.
      const std::int64_t had = step + static_cast<std::int64_t>(group_.size());
      if (in.renews() && had > 0) {
        warn_pass_ended_epoch(had, o_.steps_per_epoch);
        in.end_pass();
      } else if (o_.steps_per_epoch > 0) {
        tally.ran_dry = true;
      }
      return false;
    }
    model_.check_components(batch->global->components(), "fit");
    group_examples_ += batch->global_size;
    group_.push_back(std::move(*batch));
  }
  return true;
}

bool FitLoop::run_execution(EpochInput& in, std::int64_t& step, EpochTally& tally, GpuUtilization& utilization) {
  const std::int64_t n = steps_ < 0 ? model_.steps_per_execution_
                                    : std::min(model_.steps_per_execution_, steps_ - step);
  const auto group_due = [&] {  // the next batch starts a group: read it (false: no batch)
    if (group_at_ < group_.size()) return true;
    if (input_ended_) return false;
    const LoopScope timed(LoopPhase::kInputWait);
    input_ended_ = !read_group(in, step, tally);
    return !group_.empty();
  };
  if (!group_due()) return false;
  const std::int64_t begin = step;
  {
    static const Logs kNone;  // Keras' batch-begin logs: none
    const LoopScope timed(LoopPhase::kCallbacks);
    callbacks.each([&](Callback& c) { c.on_train_batch_begin(begin, kNone); });
  }
  for (std::int64_t i = 0; i < n && group_due(); ++i, ++step) {
    ++tally.steps;
    using Use = Model::GradientUse;
    const Use use = group_at_ + 1 < group_.size() ? Use::kHoldBack : Use::kApply;
    const distribute::DistributedBatch& batch = group_[group_at_++];
    {
      const LoopScope timed(LoopPhase::kStep);
      model_.train_micro_step(batch, first_example_, group_examples_, use, &pending_);
    }
    first_example_ += batch.global_size;
    ++global_step_;
    if (global_step_ == warmup_) timed_start_ = std::chrono::steady_clock::now();
    utilization.maybe_sample();
  }
  executions_.push_back({pending_.steps.size(), step - 1});
  // Read now unless the next execution's steps still fit beside the pending ones.
  const auto next_steps = static_cast<std::size_t>(model_.steps_per_execution_);
  if (!defer_reads_ || pending_.steps.size() + next_steps > kMaxPendingSteps) read_pending();
  return group_at_ < group_.size() || !input_ended_;
}

void FitLoop::read_pending() {
  if (executions_.empty()) return;
  {
    const LoopScope timed(LoopPhase::kRead);
    model_.read_numbers(pending_);
  }
  std::size_t first = 0;
  const bool stopped_before = model_.stop_training;  // (by something else: every batch end runs)
  bool stopped = false;
  for (const PendingExecution& e : executions_) {
    {
      const LoopScope timed(LoopPhase::kRead);
      model_.merge_read_numbers(pending_, first, e.steps_end);
      model_.collect_logs_into(batch_logs_, "");
    }
    first = e.steps_end;
    // Without deferral training would have stopped after that batch end: no callback is shown
    // a later batch (TerminateOnNaN's first non-finite loss is the last one any callback sees).
    if (stopped) continue;
    const LoopScope timed(LoopPhase::kCallbacks);
    callbacks.each([&](Callback& c) { c.on_train_batch_end(e.last_batch, batch_logs_); });
    stopped = model_.stop_training && !stopped_before;
  }
  pending_.steps.clear();  // keeping its memory for the next read
  executions_.clear();
}

std::optional<training::AgreedStop> FitLoop::poll_stop() {
  // Several workers agree on whether any of them was asked to stop with one small exchange, made
  // every kStopCheckEvery boundaries: measured on the 2-core VM under load (2 workers), 20 us to
  // 1.5 ms each (the two processes must both run), against ~1 ms steps of the flagship MLP.
  constexpr std::int64_t kStopCheckEvery = 8;
  const distribute::Strategy* s = model_.strategy_;
  const bool exchanges = s && s->num_workers() > 1 && training::stop_requests_expected();
  if (exchanges && ++boundaries_ % kStopCheckEvery != 0) return std::nullopt;
  return training::agreed_stop(s);
}

void FitLoop::interrupt(int epoch, std::int64_t steps_done) {
  // Several workers that did not agree on the step (no stop requests expected) each stop at the
  // step their own signal came before: none writes a backup (the last scheduled one stays).
  const bool several = model_.strategy_ && model_.strategy_->num_workers() > 1;
  std::string dir;
  if (backup_ && (!several || training::stop_requests_expected())) {
    backup_->backup_now(epoch, steps_done);
    dir = backup_->backup_dir();
  }
  throw training::Interrupted(stop_.reason, epoch, steps_done, dir, several ? stop_.worker : -1);
}

void FitLoop::update_timing() {
  if (global_step_ <= warmup_) return;
  FitTiming& t = model_.timing_;
  t.steps = global_step_ - warmup_;
  t.seconds = seconds_since(timed_start_);
  t.steps_per_second = t.seconds > 0 ? static_cast<double>(t.steps) / t.seconds : 0;
}

bool CallbackList::log_learning_rate() const {
  for (const auto& c : cbs)
    if (dynamic_cast<const ReduceLROnPlateau*>(c.get()) || dynamic_cast<const LearningRateScheduler*>(c.get()))
      return true;
  return false;
}

Logs FitLoop::epoch_logs(const EpochTally& tally) {
  update_timing();
  Logs out = model_.collect_logs("");
  std::uint64_t peak = 0;
  for (auto* d : devices_) peak = std::max(peak, context_peak_bytes(*d));
  out["peak_memory_mib"] = static_cast<double>(peak) / (1024.0 * 1024.0);
  if (tally.gpu_utilization) out["gpu_utilization"] = *tally.gpu_utilization;
  if (const auto* ls = dynamic_cast<const optimizers::LossScaleOptimizer*>(model_.optimizer_.get())) {
    out["loss_scale"] = ls->loss_scale();
    out["skipped_steps"] = static_cast<double>(ls->skipped_steps());
  }
  const double epoch_seconds = seconds_since(tally.start);
  if (tally.steps > 0 && epoch_seconds > 0) {
    out["input_wait_share"] = tally.input_seconds / epoch_seconds;
    out["steps_per_second"] = static_cast<double>(tally.steps) / epoch_seconds;
  }
  // Keras' optimizer.learning_rate, read as float32 as Keras reads it: the rate of the next step
  // (a schedule's at the optimizer's iterations), before any callback changes it this epoch end.
  if (callbacks.log_learning_rate())
    out["learning_rate"] = static_cast<float>(model_.optimizer_->current_learning_rate());
  if (o_.validation_data) {
    Logs v = model_.evaluate_impl(*o_.validation_data, o_.validation_steps, {}, 0);
    for (const auto& [k, val] : v) out["val_" + k] = val;
  }
  return out;
}

}  // namespace lockstep::detail
