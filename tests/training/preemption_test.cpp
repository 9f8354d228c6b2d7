// training::request_stop: fit stops at the next step boundary, BackupAndRestore writes its
// mid-epoch backup there, fit throws Interrupted, and a resumed fit ends bit-identical to one
// that was never stopped. The library installs no signal handler; a program's may call
// request_stop (async-signal-safe), as lockstep train's does.
#include "lockstep/training/preemption.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <functional>
#include <optional>

#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/checkpointing.hpp"
#include "training/training_test_util.hpp"

using namespace lockstep;

namespace {
// 200 examples in batches of 10: 20 steps per epoch.
data::Dataset toy_batches() {
  const test::Toy toy = test::make_toy(200);
  return data::Dataset::from_tensor_slices(toy.x, toy.y).shuffle(200, 7).batch(10);
}
std::unique_ptr<Sequential> make_model() {
  set_random_seed(3);
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 2), layers::Dense(2, "softmax")});
  m->compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}
std::shared_ptr<BackupAndRestore> backup(const std::string& dir) {
  return std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{
      .backup_dir = dir, .save_freq = SaveFreq::every(7), .delete_checkpoint = false});
}
// A callback that runs `action` after the `n`th batch of all (asks for a stop, raises a signal).
std::shared_ptr<Callback> after_batches(int n, std::function<void()> action) {
  auto seen = std::make_shared<int>(0);
  return std::make_shared<LambdaCallback>(
      LambdaCallbackOptions{.on_train_batch_end = [seen, n, action](std::int64_t, const Logs&) {
        if (++*seen == n) action();
      }});
}
// What fit threw, or nothing when it ran to its end.
std::optional<training::Interrupted> fit_until_stopped(Model& model, const FitOptions& o) {
  try {
    model.fit(toy_batches(), o);
  } catch (const training::Interrupted& e) {
    return e;
  }
  return std::nullopt;
}
extern "C" void test_handler(int signal_number) { training::request_stop(signal_number); }
struct ClearStop {
  ClearStop() { training::clear_stop_request(); }
  ~ClearStop() { training::clear_stop_request(); }
};
}  // namespace

TEST(Preemption, FirstReasonIsKeptUntilCleared) {
  ClearStop clear;
  EXPECT_FALSE(training::stop_requested());
  training::request_stop(SIGTERM);
  training::request_stop(SIGINT);
  EXPECT_TRUE(training::stop_requested());
  EXPECT_EQ(training::stop_reason(), SIGTERM);
  EXPECT_EQ(training::stop_reason_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(training::stop_reason_name(0), "a stop request");
  training::clear_stop_request();
  EXPECT_FALSE(training::stop_requested());
}

// One process (no strategy, or one worker): agreed_stop is this process's own request, with no
// exchange; Interrupted names the worker only under several.
TEST(Preemption, AgreedStopOfOneProcessIsItsOwnRequest) {
  ClearStop clear;
  training::expect_stop_requests(true);
  EXPECT_FALSE(training::agreed_stop(nullptr).has_value());
  training::request_stop(SIGHUP);
  const auto stop = training::agreed_stop(nullptr);
  training::expect_stop_requests(false);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->reason, SIGHUP);
  EXPECT_EQ(stop->worker, 0);
  EXPECT_STREQ(training::Interrupted(SIGHUP, 0, 3, "").what(),
               "fit: interrupted by SIGHUP at epoch 1, step 3: no backup saved");
  EXPECT_STREQ(training::Interrupted(SIGTERM, 1, 7, "b", 1).what(),
               "fit: interrupted by SIGTERM (sent to worker 1) at epoch 2, step 7: backup saved in b");
}

// 2 epochs of 20 steps; stopped after step 25 (epoch 2, step 5), between the every-7 backups
// (after 21 and 28): the stop's own backup is at epoch 2, batch 5, and resuming from it gives
// the uninterrupted run's weights bit for bit.
TEST(Preemption, StopsAtStepBoundaryWithBackupAndResumesBitIdentical) {
  ClearStop clear;
  const FitOptions run{.epochs = 2, .verbose = 0};
  auto want = make_model();
  want->fit(toy_batches(), run);
  ASSERT_EQ(want->optimizer()->iterations(), 40);

  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "preemption").string();
  std::filesystem::remove_all(dir);
  auto stopped = make_model();
  FitOptions o = run;
  o.callbacks = {backup(dir), after_batches(25, [] { training::request_stop(SIGTERM); })};
  const auto stop = fit_until_stopped(*stopped, o);
  ASSERT_TRUE(stop) << "fit did not stop";
  EXPECT_EQ(stop->reason(), SIGTERM);
  EXPECT_EQ(stop->epoch(), 1);
  EXPECT_EQ(stop->steps_in_epoch(), 5);
  EXPECT_EQ(stop->backup_dir(), dir);
  EXPECT_NE(std::string(stop->what()).find("interrupted by SIGTERM at epoch 2, step 5: backup saved in"),
            std::string::npos)
      << stop->what();
  EXPECT_EQ(stopped->optimizer()->iterations(), 25);  // the step it stopped after finished
  const io::CheckpointManager manager(dir);
  ASSERT_TRUE(manager.latest());
  const io::TrainingState state = io::read_checkpoint(*manager.latest()).state;
  EXPECT_EQ(state.epoch, 1);
  EXPECT_EQ(state.batch_in_epoch, 5);

  training::clear_stop_request();
  auto resumed = make_model();
  o.callbacks = {backup(dir)};
  resumed->fit(toy_batches(), o);
  EXPECT_EQ(resumed->optimizer()->iterations(), 40);
  for (std::size_t i = 0; i < want->variables().size(); ++i)
    EXPECT_EQ(resumed->variables()[i].value().to_vector<float>(),
              want->variables()[i].value().to_vector<float>())
        << want->variables()[i].name();
}

TEST(Preemption, StopsBetweenExecutionsAndResumesBitIdentical) {
  // steps_per_execution 3 in epochs of 20 batches: executions end at batches 2, 5, ..., 17, 19.
  // A stop asked at the 9th execution's end (epoch 2, batch 5) stops there, 6 steps into the
  // epoch; resumed (in executions from batch 6 on), training ends with the weights of N = 1.
  ClearStop clear;
  const FitOptions run{.epochs = 2, .verbose = 0};
  auto want = make_model();
  want->fit(toy_batches(), run);
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "preemption_spe").string();
  std::filesystem::remove_all(dir);
  auto stopped = make_model();
  stopped->set_steps_per_execution(3);
  FitOptions o = run;
  o.callbacks = {backup(dir), after_batches(9, [] { training::request_stop(SIGTERM); })};
  const auto stop = fit_until_stopped(*stopped, o);
  ASSERT_TRUE(stop) << "fit did not stop";
  EXPECT_EQ(stop->epoch(), 1);
  EXPECT_EQ(stop->steps_in_epoch(), 6);
  EXPECT_EQ(stopped->optimizer()->iterations(), 26);
  training::clear_stop_request();
  auto resumed = make_model();
  resumed->set_steps_per_execution(3);
  o.callbacks = {backup(dir)};
  resumed->fit(toy_batches(), o);
  EXPECT_EQ(resumed->optimizer()->iterations(), 40);
  for (std::size_t i = 0; i < want->variables().size(); ++i)
    EXPECT_EQ(resumed->variables()[i].value().to_vector<float>(), want->variables()[i].value().to_vector<float>())
        << want->variables()[i].name();
}

// From a real signal handler; without BackupAndRestore fit still stops, and says no backup was saved.
TEST(Preemption, SignalHandlerStopsFitWithoutBackup) {
  ClearStop clear;
  auto model = make_model();
  auto* previous = std::signal(SIGUSR1, test_handler);
  FitOptions o{.epochs = 3, .verbose = 0};
  o.callbacks = {after_batches(3, [] { std::raise(SIGUSR1); })};
  const auto stop = fit_until_stopped(*model, o);
  std::signal(SIGUSR1, previous);
  ASSERT_TRUE(stop) << "fit did not stop";
  EXPECT_EQ(stop->reason(), SIGUSR1);
  EXPECT_EQ(stop->steps_in_epoch(), 3);
  EXPECT_TRUE(stop->backup_dir().empty());
  EXPECT_NE(std::string(stop->what()).find("no backup saved"), std::string::npos) << stop->what();
  EXPECT_EQ(model->optimizer()->iterations(), 3);
}

// With gradient accumulation the stop waits for the group's end, so no held-back gradient is lost.
TEST(Preemption, WaitsForTheAccumulationGroupToEnd) {
  ClearStop clear;
  auto model = make_model();
  FitOptions o{.epochs = 1, .verbose = 0, .gradient_accumulation_steps = 4};
  o.callbacks = {after_batches(5, [] { training::request_stop(); })};
  const auto stop = fit_until_stopped(*model, o);
  ASSERT_TRUE(stop) << "fit did not stop";
  EXPECT_EQ(stop->reason(), 0);
  EXPECT_EQ(stop->steps_in_epoch(), 8);
  EXPECT_EQ(model->optimizer()->iterations(), 2);  // two whole groups of 4
}
