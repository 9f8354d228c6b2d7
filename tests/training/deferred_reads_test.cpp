// Deferred reads (FitLoop::kMaxPendingSteps, Callback::async_safe): where every callback is
// async-safe, fit reads the numbers of several steps at once, and every callback still gets each
// batch's own logs, in order; History and the weights are those of a read at every step. One
// callback that is not async-safe brings back a read per execution.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "common/mirrored_model.hpp"
#include "common/random_data.hpp"
#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/checkpointing.hpp"
#include "lockstep/training/preemption.hpp"
#include "lockstep/training/progbar.hpp"
#include "training/fit_loop.hpp"
#include "training/step_numbers.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {

using detail::FitLoop;
using detail::host_number_reads;

// 150 examples in batches of 4: 38 batches an epoch (the last of 2), more than two reads' worth
// of pending steps (16).
const test::Classification& data() {
  static const test::Classification d = test::random_classification(150, 20, 5, 7);
  return d;
}
data::Dataset batches() { return data::Dataset::from_tensor_slices(data().x, data().y).batch(4); }
constexpr std::int64_t kSteps = 38;
static_assert(kSteps > 2 * FitLoop::kMaxPendingSteps);

std::unique_ptr<Sequential> make_model(std::int64_t steps_per_execution) {
  set_random_seed(3);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(16, "relu", 20), layers::Dropout(0.25), layers::Dense(5, "softmax")});
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->set_steps_per_execution(steps_per_execution);
  return m;
}

// Records every batch end (its batch and logs), and may stop training after one batch end or ask
// for a stop (training::request_stop) before the step of one batch of the fit (under
// steps_per_execution 1).
class Recorder final : public Callback {
 public:
  explicit Recorder(bool async_safe, std::int64_t stop_after = -1, std::int64_t request_stop_at = -1)
      : async_safe_(async_safe), stop_after_(stop_after), request_stop_at_(request_stop_at) {}
  bool async_safe() const override { return async_safe_; }
  void on_train_batch_begin(std::int64_t, const Logs&) override {
    if (begun_++ == request_stop_at_) training::request_stop(SIGTERM);
  }
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override {
    seen.emplace_back(batch, logs);
    if (batch == stop_after_) model_->stop_training = true;
  }
  std::vector<std::pair<std::int64_t, Logs>> seen;

 private:
  bool async_safe_;
  std::int64_t stop_after_, request_stop_at_;  // a batch of the epoch; a batch of the fit
  std::int64_t begun_ = 0;
};

struct FitRun {
  std::vector<std::vector<float>> weights;
  std::map<std::string, std::vector<double>> history;
  std::vector<std::pair<std::int64_t, Logs>> batches;  // the recorder's
  std::int64_t updates = 0;
  std::int64_t reads = 0;
};

// replicas 0: no strategy; o.callbacks run before the recorder.
FitRun fit_run(int replicas, std::int64_t steps_per_execution, FitOptions o, std::shared_ptr<Recorder> recorder) {
  const auto on = test::model_on_cpus(replicas, [&] { return make_model(steps_per_execution); });
  o.verbose = 0;
  o.callbacks.push_back(recorder);
  const std::int64_t reads = host_number_reads();
  const History h = on.model->fit(batches(), o);
  FitRun r{.weights = test::weights_of(*on.model),
           .history = h.history,
           .batches = recorder->seen,
           .updates = on.model->optimizer()->iterations()};
  r.reads = host_number_reads() - reads;
  return r;
}

void expect_same(const FitRun& a, const FitRun& b) {
  EXPECT_EQ(a.updates, b.updates);
  EXPECT_EQ(a.weights, b.weights) << "the weights must be bit-identical";
  // (The timings and peak memory differ from run to run: pending numbers are kept longer.)
  for (const char* k : {"loss", "accuracy", "val_loss", "val_accuracy"})
    EXPECT_EQ(a.history.at(k), b.history.at(k)) << k;
  ASSERT_EQ(a.batches.size(), b.batches.size());
  for (std::size_t i = 0; i < a.batches.size(); ++i) {
    EXPECT_EQ(a.batches[i].first, b.batches[i].first) << "batch end " << i;
    EXPECT_EQ(a.batches[i].second, b.batches[i].second) << "the logs of batch " << a.batches[i].first;
  }
}

struct Config {
  std::int64_t steps_per_execution;
  int accumulation;
};
constexpr Config kConfigs[] = {{1, 1}, {3, 1}, {1, 2}, {3, 2}};

TEST(DeferredReads, SameLogsHistoryAndWeightsAsAReadEachExecution) {
  for (int replicas : {0, 2}) {
    for (const Config& s : kConfigs) {
      SCOPED_TRACE(std::to_string(replicas) + " replicas, steps_per_execution " +
                   std::to_string(s.steps_per_execution) + ", accumulation " + std::to_string(s.accumulation));
      const FitOptions o{.epochs = 2,
                         .validation_data = batches().take(3),
                         .gradient_accumulation_steps = s.accumulation};
      FitOptions each = o;
      each.defer_reads = false;
      const FitRun deferred = fit_run(replicas, s.steps_per_execution, o, std::make_shared<Recorder>(true));
      const FitRun read_each = fit_run(replicas, s.steps_per_execution, each, std::make_shared<Recorder>(true));
      expect_same(deferred, read_each);
      EXPECT_LT(deferred.reads, read_each.reads);
    }
  }
}

// 38 steps: reads after 16, 32 and 38 (the epoch's end); executions of 3 (12 of 3, then 2):
// after 5 executions (15 steps; a sixth would pass 16), 10, and 13. A callback that is not
// async-safe, FitOptions::defer_reads false or LOCKSTEP_SYNC_EACH_STEP=1: one per execution.
TEST(DeferredReads, ReadsOncePerSixteenStepsOnlyWhereEveryCallbackIsAsyncSafe) {
  for (const std::int64_t spe : {1, 3}) {
    SCOPED_TRACE("steps_per_execution " + std::to_string(spe));
    const std::int64_t executions = spe == 1 ? kSteps : 13;
    const FitRun deferred = fit_run(0, spe, {}, std::make_shared<Recorder>(true));
    EXPECT_EQ(deferred.reads, 3);
    EXPECT_EQ(deferred.batches.size(), static_cast<std::size_t>(executions));
    FitOptions with_sync;
    with_sync.callbacks = {std::make_shared<Recorder>(false)};
    EXPECT_EQ(fit_run(0, spe, with_sync, std::make_shared<Recorder>(true)).reads, executions);
    EXPECT_EQ(fit_run(0, spe, {.defer_reads = false}, std::make_shared<Recorder>(true)).reads, executions);
    // Keras' callbacks that log per epoch are async-safe; per batch they are not.
    FitOptions builtin;
    builtin.callbacks = {std::make_shared<TerminateOnNaN>(), std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "loss"}),
                         std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{.monitor = "loss"})};
    EXPECT_EQ(fit_run(0, spe, builtin, std::make_shared<Recorder>(true)).reads, 3);
  }
}

// Keras' callbacks that act per epoch are async-safe; those that act every N batches are not
// (a save or a scalar must be that batch's), nor a user's batch hook.
TEST(DeferredReads, BuiltInCallbacksAreAsyncSafeWhereTheyActPerEpoch) {
  const std::string dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "deferred_reads_cb").string();
  EXPECT_TRUE(ProgbarLogger().async_safe());
  EXPECT_TRUE(TerminateOnNaN().async_safe());
  EXPECT_TRUE(LearningRateScheduler([](int, double lr) { return lr; }).async_safe());
  EXPECT_FALSE(LambdaCallback({.on_train_batch_end = [](std::int64_t, const Logs&) {}}).async_safe());
  EXPECT_FALSE(LambdaCallback({.on_train_batch_begin = [](std::int64_t, const Logs&) {}}).async_safe());
  EXPECT_TRUE(LambdaCallback({.on_epoch_end = [](int, const Logs&) {}}).async_safe());
  EXPECT_FALSE(TensorBoard({.log_dir = dir, .update_freq = SaveFreq::every(5)}).async_safe());
  EXPECT_TRUE(TensorBoard({.log_dir = dir}).async_safe());
  EXPECT_FALSE(ModelCheckpoint({.filepath = dir + "/ckpt", .save_freq = SaveFreq::every(5)}).async_safe());
  EXPECT_TRUE(ModelCheckpoint({.filepath = dir + "/ckpt"}).async_safe());
  EXPECT_FALSE(BackupAndRestore({.backup_dir = dir, .save_freq = SaveFreq::every(5)}).async_safe());
  EXPECT_TRUE(BackupAndRestore({.backup_dir = dir}).async_safe());
  EXPECT_FALSE(Callback().async_safe());
}

TEST(DeferredReads, SyncEachStepSwitchReadsEachExecution) {
  ASSERT_EQ(setenv("LOCKSTEP_SYNC_EACH_STEP", "1", 1), 0);
  const FitRun run = fit_run(0, 1, {}, std::make_shared<Recorder>(true));
  unsetenv("LOCKSTEP_SYNC_EACH_STEP");
  EXPECT_EQ(run.reads, kSteps);
}

// A callback that is not async-safe and stops training at batch 5: the 6th step is the last, as
// ever. One that is async-safe stops at the next read, after 16 steps; no callback sees a batch
// after the one that stopped, and the epoch's logs count all 16.
TEST(DeferredReads, StopTrainingTakesEffectAtTheBatchOrAtTheNextRead) {
  const FitRun exact = fit_run(0, 1, {}, std::make_shared<Recorder>(false, 5));
  EXPECT_EQ(exact.updates, 6);
  ASSERT_EQ(exact.batches.size(), 6u);
  EXPECT_EQ(exact.batches.back().first, 5);

  auto watcher = std::make_shared<Recorder>(true);
  FitOptions o;
  o.callbacks = {std::make_shared<Recorder>(true, 5), watcher};
  const FitRun late = fit_run(0, 1, o, std::make_shared<Recorder>(true));
  EXPECT_EQ(late.updates, static_cast<std::int64_t>(FitLoop::kMaxPendingSteps));
  ASSERT_EQ(late.batches.size(), 6u) << "a batch end after the one that stopped training";
  EXPECT_EQ(late.batches.back().first, 5);
  ASSERT_EQ(watcher->seen.size(), 6u);
  // Every batch end before the stop got the logs it gets without deferral.
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(late.batches[i], exact.batches[i]) << "batch " << i;
}

// TerminateOnNaN (async-safe, as lockstep train installs it) stops at the first batch whose loss
// is not finite, and no callback after it sees that batch or a later one; deferred, the steps up
// to the read ran (16), their weights past the divergence anyway.
TEST(DeferredReads, TerminateOnNaNStopsAtTheFirstNonFiniteBatchItIsShown) {
  std::vector<float> xs = data().x.to_vector<float>();
  xs[static_cast<std::size_t>(5 * 4 * 20 + 3)] = std::numeric_limits<float>::quiet_NaN();  // batch 5's first row
  const Tensor x = Tensor::from_vector(xs, data().x.shape());
  for (const bool defer : {false, true}) {
    SCOPED_TRACE(defer ? "deferred" : "read each execution");
    auto model = make_model(1);
    auto nan_guard = std::make_shared<TerminateOnNaN>();
    auto recorder = std::make_shared<Recorder>(true);
    FitOptions o{.epochs = 2, .verbose = 0, .defer_reads = defer};
    o.callbacks = {nan_guard, recorder};
    (void)model->fit(data::Dataset::from_tensor_slices(x, data().y).batch(4), o);
    EXPECT_TRUE(nan_guard->terminated());
    EXPECT_EQ(nan_guard->epoch(), 0);
    EXPECT_EQ(nan_guard->batch(), 5);
    ASSERT_EQ(recorder->seen.size(), 6u);
    EXPECT_EQ(recorder->seen.back().first, 5);
    EXPECT_EQ(model->optimizer()->iterations(), defer ? static_cast<std::int64_t>(FitLoop::kMaxPendingSteps) : 6);
  }
}

// A stop asked before batch 5's step (training::request_stop) while its numbers and five others
// are unread: the pending batch ends run, then the backup, whose running metric states are the
// run's that read each step.
TEST(DeferredReads, StopWithReadsPendingBacksUpTheMergedNumbers) {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "deferred_reads_backup").string();
  const auto stopped = [&](bool defer) {
    std::filesystem::remove_all(dir);
    training::clear_stop_request();
    FitOptions o{.epochs = 2, .defer_reads = defer};
    o.callbacks = {std::make_shared<BackupAndRestore>(
        BackupAndRestoreOptions{.backup_dir = dir, .delete_checkpoint = false})};
    auto recorder = std::make_shared<Recorder>(true, -1, kSteps + 5);  // epoch 2, batch 5
    const std::int64_t before = host_number_reads();
    std::optional<training::Interrupted> stop;
    try {
      (void)fit_run(0, 1, o, recorder);
    } catch (const training::Interrupted& e) {
      stop = e;
    }
    training::clear_stop_request();
    EXPECT_TRUE(stop) << "fit did not stop";
    if (stop) {
      EXPECT_EQ(stop->epoch(), 1);
      EXPECT_EQ(stop->steps_in_epoch(), 6);
    }
    const io::CheckpointManager manager(dir);
    EXPECT_TRUE(manager.latest());
    const io::Checkpoint ckpt = io::read_checkpoint(*manager.latest());
    return std::make_tuple(ckpt.state, recorder->seen, host_number_reads() - before, ckpt.tensors.tensors);
  };
  const auto [state, seen, reads, tensors] = stopped(true);
  const auto [want_state, want_seen, reads_each, want_tensors] = stopped(false);
  EXPECT_EQ(reads, 3 + 1) << "epoch 1: 16, 32, 38; epoch 2: the 6 steps before the stop";
  EXPECT_EQ(reads_each, kSteps + 6);
  EXPECT_EQ(state.batch_in_epoch, 6);
  EXPECT_EQ(state.iterations, want_state.iterations);
  EXPECT_EQ(state.values, want_state.values) << "the backup's metric states";
  EXPECT_NE(state.values.count("metrics/loss/0"), 0u);
  EXPECT_EQ(seen, want_seen);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kSteps + 6));
  EXPECT_EQ(seen.back().first, 5);
  ASSERT_EQ(tensors.size(), want_tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(tensors[i].second.bitwise_equal(want_tensors[i].second));
}

}  // namespace
}  // namespace lockstep
