// steps_per_execution (Keras 3's compile argument): N batches per host round trip give the weights
// and logs of N = 1; callbacks fire once per execution with its first and last batch; the losses
// and metrics are merged once per execution.
#include <gtest/gtest.h>

#include <filesystem>
#include <utility>

#include "common/mirrored_model.hpp"
#include "common/random_data.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {


const test::Classification& data() {
  static const test::Classification d = test::random_classification(26, 20, 5, 7);
  return d;
}

std::unique_ptr<Sequential> make_model(std::int64_t steps_per_execution) {
  set_random_seed(3);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(16, "relu", 20), layers::Dropout(0.25), layers::Dense(5, "softmax")});
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->set_steps_per_execution(steps_per_execution);
  return m;
}

struct FitRun {
  std::vector<std::vector<float>> weights;
  std::map<std::string, std::vector<double>> history;
  std::int64_t updates = 0;
};

// 26 examples in batches of 4: 7 batches a pass, the last one short. `steps_per_epoch` > 0 reads
// a repeated dataset. replicas 0: no strategy.
FitRun fit_run(std::int64_t n, int replicas, FitOptions o, std::int64_t steps_per_epoch = -1) {
  const auto on = test::model_on_cpus(replicas, [&] { return make_model(n); });
  auto ds = data::Dataset::from_tensor_slices(data().x, data().y).batch(4);
  if (steps_per_epoch > 0) ds = ds.repeat();
  o.steps_per_epoch = steps_per_epoch;
  o.verbose = 0;
  const History h = on.model->fit(ds, o);
  return {.weights = test::weights_of(*on.model), .history = h.history, .updates = on.model->optimizer()->iterations()};
}

void expect_same(const FitRun& a, const FitRun& b, const std::string& what) {
  EXPECT_EQ(a.updates, b.updates) << what;
  EXPECT_EQ(a.weights, b.weights) << what << ": the weights must be bit-identical";
  for (const char* k : {"loss", "accuracy"}) EXPECT_EQ(a.history.at(k), b.history.at(k)) << what << ": " << k;
}

TEST(StepsPerExecution, SameWeightsAndLogsAsOneStepPerExecution) {
  for (int replicas : {0, 2}) {
    const std::string at = std::to_string(replicas) + " replicas";
    // 7 batches an epoch: executions of 4 and 3.
    expect_same(fit_run(4, replicas, {.epochs = 2}), fit_run(1, replicas, {.epochs = 2}), at);
    // steps_per_epoch = 5 of a repeated dataset: 4 + 1 a epoch, epochs start mid-pass.
    expect_same(fit_run(4, replicas, {.epochs = 3}, 5), fit_run(1, replicas, {.epochs = 3}, 5), at + ", spe 5");
    // N larger than an epoch: one execution an epoch.
    expect_same(fit_run(100, replicas, {.epochs = 2}), fit_run(1, replicas, {.epochs = 2}), at + ", N = 100");
    // Gradient accumulation groups of 3 spanning executions of 4.
    expect_same(fit_run(4, replicas, {.epochs = 2, .gradient_accumulation_steps = 3}),
                fit_run(1, replicas, {.epochs = 2, .gradient_accumulation_steps = 3}), at + ", accumulation 3");
  }
}

TEST(StepsPerExecution, SameWeightsUnderMixedPrecision) {
  for (const char* policy : {"mixed_float16", "mixed_bfloat16"}) {
    mixed_precision::set_global_policy(policy);
    const FitRun four = fit_run(3, 0, {.epochs = 2});
    const FitRun one = fit_run(1, 0, {.epochs = 2});
    mixed_precision::set_global_policy("float32");
    expect_same(four, one, policy);
  }
}

// What a recording callback sees: "begin <i>" and "end <i> <loss>" per call.
struct Recorder {
  std::vector<std::string> calls;
  std::vector<Logs> end_logs;
  CallbackPtr callback() {
    return std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_epoch_begin = [this](int e, const Logs&) { calls.push_back("epoch " + std::to_string(e)); },
        .on_train_batch_begin = [this](std::int64_t b, const Logs&) { calls.push_back("begin " + std::to_string(b)); },
        .on_train_batch_end =
            [this](std::int64_t b, const Logs& l) {
              calls.push_back("end " + std::to_string(b));
              end_logs.push_back(l);
            },
    });
  }
};

TEST(StepsPerExecution, CallbacksSeeEachExecutionsFirstAndLastBatch) {
  // Keras 3: on_train_batch_begin(first batch) and on_train_batch_end(last batch, logs), once
  // per execution; the last execution of an epoch is cut to the batches left.
  Recorder four;
  fit_run(4, 0, {.epochs = 2, .callbacks = {four.callback()}});
  const std::vector<std::string> want = {"epoch 0", "begin 0", "end 3", "begin 4", "end 6",
                                         "epoch 1", "begin 0", "end 3", "begin 4", "end 6"};
  EXPECT_EQ(four.calls, want);
  Recorder spe;
  fit_run(4, 0, {.epochs = 2, .callbacks = {spe.callback()}}, 10);
  EXPECT_EQ(spe.calls, (std::vector<std::string>{"epoch 0", "begin 0", "end 3", "begin 4", "end 7", "begin 8",
                                                 "end 9", "epoch 1", "begin 0", "end 3", "begin 4", "end 7",
                                                 "begin 8", "end 9"}));
  // An execution's logs are those after its last batch, as with one batch per execution.
  Recorder one;
  fit_run(1, 0, {.epochs = 2, .callbacks = {one.callback()}});
  ASSERT_EQ(one.end_logs.size(), 14u);
  ASSERT_EQ(four.end_logs.size(), 4u);
  EXPECT_EQ(four.end_logs[0], one.end_logs[3]);
  EXPECT_EQ(four.end_logs[1], one.end_logs[6]);
  EXPECT_EQ(four.end_logs[3], one.end_logs[13]);
}

TEST(StepsPerExecution, EvaluateAndPredictRunInExecutions) {
  auto model = make_model(1);
  model->fit(data().x, data().y, {.batch_size = 4, .verbose = 0});
  const Logs one = model->evaluate(data().x, data().y, {.batch_size = 4});
  const Tensor predicted_one = model->predict(data().x, {.batch_size = 4});
  model->set_steps_per_execution(3);
  struct Calls final : Callback {
    std::vector<std::string> calls;
    void on_test_batch_begin(std::int64_t b, const Logs&) override { calls.push_back("test_begin " + std::to_string(b)); }
    void on_test_batch_end(std::int64_t b, const Logs&) override { calls.push_back("test_end " + std::to_string(b)); }
    void on_predict_batch_begin(std::int64_t b, const Logs&) override {
      calls.push_back("predict_begin " + std::to_string(b));
    }
    void on_predict_batch_end(std::int64_t b, const Logs&) override { calls.push_back("predict_end " + std::to_string(b)); }
  };
  auto cb = std::make_shared<Calls>();
  std::vector<std::string>& calls = cb->calls;
  EXPECT_EQ(model->evaluate(data().x, data().y, {.batch_size = 4, .callbacks = {cb}}), one);
  const Tensor predicted = model->predict(data().x, {.batch_size = 4, .callbacks = {cb}});
  EXPECT_EQ(predicted.to_vector<float>(), predicted_one.to_vector<float>());
  EXPECT_EQ(calls, (std::vector<std::string>{"test_begin 0", "test_end 2", "test_begin 3", "test_end 5",
                                             "test_begin 6", "test_end 6", "predict_begin 0", "predict_end 2",
                                             "predict_begin 3", "predict_end 5", "predict_begin 6",
                                             "predict_end 6"}));
  // evaluate(steps = 5): executions of 3 and 2.
  calls.clear();
  model->evaluate(data::Dataset::from_tensor_slices(data().x, data().y).batch(4), {.steps = 5, .callbacks = {cb}});
  EXPECT_EQ(calls, (std::vector<std::string>{"test_begin 0", "test_end 2", "test_begin 3", "test_end 4"}));
}

// A metric that records, at each batch, how many examples its running state already holds: the
// running state (on the host) takes an execution's numbers only at the execution's end.
class CountsSeen final : public metrics::Metric {
 public:
  explicit CountsSeen(std::vector<double>* seen) : Metric("counts_seen"), seen_(seen) {}
  Tensor batch_state(const Tensor&, const Tensor& y_pred) const override {
    seen_->push_back(state()[1]);
    return Tensor::from_vector(std::vector<float>{0.0f, static_cast<float>(y_pred.dim(0))}, {2});
  }
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<CountsSeen>(seen_); }

 private:
  std::vector<double>* seen_;
};

TEST(StepsPerExecution, MetricsAreMergedOncePerExecution) {
  std::vector<double> seen;
  set_random_seed(3);
  Sequential model({layers::Dense(5, "softmax", 20)});
  model.compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(),
                std::vector<metrics::MetricPtr>{std::make_shared<CountsSeen>(&seen)});
  model.set_steps_per_execution(3);
  model.fit(data::Dataset::from_tensor_slices(data().x, data().y).batch(4), {.verbose = 0, .defer_reads = false});
  // Batches of 4,4,4 | 4,4,4 | 2: the state grows by 12 after each execution, not each batch.
  EXPECT_EQ(seen, (std::vector<double>{0, 0, 0, 12, 12, 12, 24}));
  // Where no callback needs each execution's numbers (none here), they wait for the epoch's end
  // (fewer than FitLoop::kMaxPendingSteps steps).
  seen.clear();
  model.fit(data::Dataset::from_tensor_slices(data().x, data().y).batch(4), {.verbose = 0});
  EXPECT_EQ(seen, (std::vector<double>(7, 0.0)));
}

TEST(StepsPerExecution, ModelCheckpointCountsTheBatchesOfEachExecution) {
  // save_freq 4 with executions of 2 in epochs of 7 batches (ends at batches 1, 3, 5, 6): Keras'
  // count reaches 4 at epoch 1's batch 3, then (carried over the epoch) at epoch 2's batches 1 and 5.
  const auto dir = std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "steps_per_execution";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto checkpoint = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
      .filepath = (dir / "ckpt-{epoch}-{batch}").string(), .save_freq = SaveFreq::every(4)});
  fit_run(2, 0, {.epochs = 2, .callbacks = {checkpoint}});
  std::vector<std::string> names;
  for (const auto& p : checkpoint->saved()) names.push_back(std::filesystem::path(p).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-1-4", "ckpt-2-2", "ckpt-2-6"}));
}

TEST(StepsPerExecution, RefusesANonPositiveCount) {
  auto model = make_model(1);
  for (std::int64_t bad : {0, -2}) {
    const std::string msg = test::message_of([&] { model->set_steps_per_execution(bad); });
    EXPECT_NE(msg.find("steps_per_execution must be a positive integer, got " + std::to_string(bad)),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(model->steps_per_execution(), 1);
}

TEST(BatchSpan, CountsTheBatchesOfEachCall) {
  BatchSpan span;
  span.begin(0);
  EXPECT_EQ(span.end(3), 4);
  span.begin(4);
  EXPECT_EQ(span.end(6), 3);
  EXPECT_EQ(span.end(7), 1) << "without a begin call: the batches since the last end";
  EXPECT_EQ(span.end(0), 1) << "a new epoch";
}

}  // namespace
}  // namespace lockstep
