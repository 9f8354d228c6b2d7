// TensorFlow's custom training loop under MirroredStrategy, written as in TF's tutorial
// (strategy.run(fn, batch), model(x, training), compute_average_loss, apply_gradients inside
// the replica function, metrics' update_state, strategy.reduce): it must train exactly what
// fit/train_step trains, count each step once, and refuse a model made outside the scope.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "common/relative_error.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using lockstep::test::max_rel_diff;

namespace {

using Data = test::Classification;
Data make_data(std::int64_t n, std::uint64_t seed = 9) { return test::random_classification(n, 12, 4, seed); }

// Logits out (TF's tutorial model), so the loop's loss and fit's are the same computation.
std::unique_ptr<Sequential> make_model() {
  set_random_seed(21);
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(16, "relu", 12), layers::Dropout(0.25), layers::Dense(4)});
  return m;
}
losses::LossPtr make_loss() { return losses::SparseCategoricalCrossentropy({.from_logits = true}); }

std::vector<std::vector<float>> weights_of(const Model& m) {
  std::vector<std::vector<float>> w;
  for (const auto& v : m.variables()) w.push_back(v.value().to_vector<float>());
  return w;
}

struct LoopResult {
  std::vector<std::vector<float>> weights;
  std::int64_t iterations = 0;
  double loss_sum = 0;  // sum over steps of the global batch's mean loss
  double accuracy = 0;
};

// 23 examples in global batches of 7: 7, 7, 7, 2 (uneven splits; with 3 replicas the last
// batch leaves one replica without rows), two epochs.
constexpr std::int64_t kExamples = 23, kGlobalBatch = 7;
constexpr int kEpochs = 2;

// The TF tutorial's distributed_train_step, line for line.
LoopResult custom_loop(int replicas) {
  MirroredStrategy strategy({.num_cpu_devices = replicas});
  const Data d = make_data(kExamples);
  auto dist_ds = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(kGlobalBatch));
  auto scope = strategy.scope();
  auto model = make_model();
  auto optimizer = optimizers::Adam(1e-2);
  auto loss_object = make_loss();
  metrics::SparseCategoricalAccuracy train_accuracy;

  LoopResult r;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    auto it = dist_ds.make_iterator();
    while (auto batch = it->next()) {
      auto per_replica_losses = strategy.run(
          [&](const data::Element& xy) {
            GradientTape tape;
            const Tensor predictions = (*model)(xy[0], {.training = true});
            const Tensor loss = compute_average_loss(loss_object->per_example(xy[1], predictions));
            const auto vars = model->trainable_variables();
            optimizer->apply_gradients(tape.gradient(loss, vars), vars);
            train_accuracy.update_state(xy[1], predictions);
            return loss;
          },
          *batch);
      r.loss_sum += strategy.reduce(ReduceOp::kSum, per_replica_losses).item();
    }
  }
  strategy.check_mirrored(model->variables());
  r.weights = weights_of(*model);
  r.iterations = optimizer->iterations();
  r.accuracy = train_accuracy.result();
  return r;
}

// The same training through train_step (fit's step), on one device.
LoopResult train_step_reference() {
  const Data d = make_data(kExamples);
  auto model = make_model();
  model->compile(optimizers::Adam(1e-2), make_loss(), {"accuracy"});
  LoopResult r;
  double correct = 0, seen = 0;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (std::int64_t b = 0; b < kExamples; b += kGlobalBatch) {
      const std::int64_t e = std::min(kExamples, b + kGlobalBatch);
      r.loss_sum += model->train_step(d.x.slice(b, e), d.y.slice(b, e));
      const auto& s = model->metrics()[0].metric->state();
      correct += s[0];
      seen += s[1];
      model->metrics()[0].metric->reset_state();
    }
  }
  r.weights = weights_of(*model);
  r.iterations = model->optimizer()->iterations();
  r.accuracy = correct / seen;
  return r;
}

}  // namespace

TEST(CustomLoop, TheTutorialLoopTrainsWhatTrainStepTrainsOn1To3Replicas) {
  const LoopResult want = train_step_reference();
  ASSERT_EQ(want.iterations, kEpochs * 4);
  for (int replicas : {1, 2, 3}) {
    SCOPED_TRACE("replicas = " + std::to_string(replicas));
    const LoopResult got = custom_loop(replicas);
    // One step per global batch, not one per replica.
    EXPECT_EQ(got.iterations, want.iterations);
    EXPECT_LE(max_rel_diff(got.weights, want.weights), 1e-5);
    EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-5 * std::fabs(want.loss_sum));
    // Accuracy is computed on the same predictions: exactly the same counts.
    EXPECT_DOUBLE_EQ(got.accuracy, want.accuracy);
  }
}

TEST(CustomLoop, ApplyGradientsOutsideAStrategyCountsEveryCall) {
  auto model = make_model();
  auto optimizer = optimizers::SGD(0.1);
  const Data d = make_data(4);
  const auto vars = model->trainable_variables();
  for (int i = 0; i < 3; ++i) {
    GradientTape tape;
    const Tensor loss = make_loss()->operator()(d.y, (*model)(d.x, {.training = true}));
    optimizer->apply_gradients(tape.gradient(loss, vars), vars);
  }
  EXPECT_EQ(optimizer->iterations(), 3);
}

TEST(CustomLoop, ApplyGradientsOnAModelMadeOutsideTheScopeIsRefusedWithTheFix) {
  auto model = make_model();  // made before any scope: one copy of each variable
  MirroredStrategy strategy({.num_cpu_devices = 2});
  auto optimizer = optimizers::SGD(0.1);
  const Data d = make_data(6);
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(6));
  auto batch = dist.make_iterator()->next();
  ASSERT_TRUE(batch);
  try {
    strategy.run(
        [&](const data::Element& xy) {
          GradientTape tape;
          const Tensor loss = compute_average_loss(make_loss()->per_example(xy[1], (*model)(xy[0], {.training = true})));
          const auto vars = model->trainable_variables();
          optimizer->apply_gradients(tape.gradient(loss, vars), vars);
          return loss;
        },
        *batch);
    FAIL() << "training an unmirrored model on 2 replicas must not run";
  } catch (const ReplicaError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("was not created in the distribution strategy's scope"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.distribute(strategy)"), std::string::npos) << msg;
  }
  EXPECT_EQ(optimizer->iterations(), 0);
}

TEST(CustomLoop, CompileOrFitInAScopeOfAModelMadeOutsideItFailsWithKerasMessage) {
  auto outside = make_model();
  MirroredStrategy strategy({.num_cpu_devices = 2});
  {
    auto scope = strategy.scope();
    const std::string msg = test::message_of([&] { outside->compile("adam", "sparse_categorical_crossentropy"); });
    EXPECT_NE(msg.find("was not created in the distribution strategy scope of MirroredStrategy"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("model.distribute(strategy)"), std::string::npos) << msg;
  }
  // The fix works: distributed, it compiles and trains in the scope.
  outside->distribute(strategy);
  auto scope = strategy.scope();
  outside->compile("adam", "sparse_categorical_crossentropy");
  const Data d = make_data(8);
  outside->fit(d.x, d.y, {.epochs = 1, .batch_size = 4, .verbose = 0});
  strategy.check_mirrored(outside->variables());

  // A model of another strategy is refused too.
  MirroredStrategy other({.num_cpu_devices = 2});
  auto other_scope = other.scope();
  const std::string msg = test::message_of([&] { outside->fit(d.x, d.y, {.epochs = 1, .verbose = 0}); });
  EXPECT_NE(msg.find("mixing different strategies"), std::string::npos) << msg;
}

// A model outliving the strategy it was made in is refused by name where it is used next (it used
// to reach the destroyed strategy: a crash); its weights can still be read, to carry elsewhere.
TEST(CustomLoop, AModelWhoseStrategyIsGoneSaysSo) {
  const Data d = make_data(8);
  std::unique_ptr<Model> model;
  {
    MirroredStrategy gone({.num_cpu_devices = 2});
    auto scope = gone.scope();
    model = make_model();
    model->compile("adam", "sparse_categorical_crossentropy");
    model->fit(d.x, d.y, {.epochs = 1, .batch_size = 4, .verbose = 0});
  }
  MirroredStrategy next({.num_cpu_devices = 2});
  for (const auto& use : std::vector<std::function<void()>>{
           [&] { model->predict(d.x); }, [&] { model->evaluate(d.x, d.y); },
           [&] { model->fit(d.x, d.y, {.epochs = 1, .verbose = 0}); }, [&] { model->distribute(next); }}) {
    const std::string msg = test::message_of(use);
    EXPECT_NE(msg.find("was made in the scope of a MirroredStrategy (or distributed to it) that no longer exists"),
              std::string::npos)
        << msg;
  }
  std::vector<Tensor> weights;
  for (const auto& v : model->variables()) weights.push_back(v.value());
  auto scope = next.scope();
  auto again = make_model();
  for (std::size_t i = 0; i < weights.size(); ++i) again->variables()[i].assign(weights[i]);
  again->compile("adam", "sparse_categorical_crossentropy");
  again->fit(d.x, d.y, {.epochs = 1, .batch_size = 4, .verbose = 0});
  EXPECT_EQ(again->predict(d.x).shape()[0], 8);
}

TEST(CustomLoop, EvaluateAndPredictAgreeOn1And3Replicas) {
  const Data d = make_data(23);
  const auto run = [&](int replicas) {
    MirroredStrategy strategy({.num_cpu_devices = replicas});
    auto scope = strategy.scope();
    auto model = make_model();
    model->compile(optimizers::Adam(1e-2), make_loss(), {"accuracy"});
    const Logs logs = model->evaluate(d.x, d.y, {.batch_size = 7});
    return std::make_pair(logs, model->predict(d.x, {.batch_size = 7}).to_vector<float>());
  };
  const auto [logs1, pred1] = run(1);
  const auto [logs3, pred3] = run(3);
  EXPECT_NEAR(logs3.at("loss"), logs1.at("loss"), 1e-6 * std::fabs(logs1.at("loss")));
  EXPECT_DOUBLE_EQ(logs3.at("accuracy"), logs1.at("accuracy"));
  ASSERT_EQ(pred1.size(), pred3.size());
  for (std::size_t i = 0; i < pred1.size(); ++i) EXPECT_NEAR(pred3[i], pred1[i], 1e-6f) << i;
}

TEST(CustomLoop, ComputeAverageLossDividesByTheGlobalBatchInsideRun) {
  MirroredStrategy strategy({.num_cpu_devices = 3});
  const Data d = make_data(7);
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(7));
  auto batch = dist.make_iterator()->next();
  ASSERT_TRUE(batch);
  // Slices of 3, 2, 2 rows: each replica's ones sum to its row count / 7.
  const auto parts = strategy.run(
      [&](const data::Element& xy) { return compute_average_loss(Tensor::ones({xy[0].dim(0)})); }, *batch);
  EXPECT_NEAR(strategy.reduce(ReduceOp::kSum, parts).item(), 1.0, 1e-6);
  EXPECT_NEAR(parts[0].item(), 3.0 / 7.0, 1e-6);
  // Outside a strategy: the batch's own size.
  EXPECT_NEAR(compute_average_loss(Tensor::ones({4})).item(), 1.0, 1e-6);
}
