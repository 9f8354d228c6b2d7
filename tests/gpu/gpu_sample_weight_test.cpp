// Sample weights on GPU replicas: the weights travel to each device with their slice of the batch
// (copied ahead with it), and the weighted loss is captured with the step, so a captured step
// (jit_compile=True) trains the eager step's bits, which are the CPU's, on one replica and on two
// logical replicas of one GPU; evaluate's captured step reads the weights alike, and so do the
// weighted metrics (compile's weighted_metrics), whose states are captured with the steps. CI runs them on
// emulated GPUs (gpu.emulated), which capture as real ones do.
#include <cmath>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses, weighted_accuracy;
  double eval_loss = 0, eval_weighted_accuracy = 0;
};

// Two epochs of fit (in order) and an evaluate, with the sample weights `w` (undefined: none), in
// batches of `batch`; the weighted metric is compile's weighted "accuracy".
Trained fit_and_evaluate(Model& m, const Tensor& x, const Tensor& y, const Tensor& w, std::int64_t batch) {
  FitOptions fit{.epochs = 2, .batch_size = batch, .shuffle = false, .verbose = 0};
  fit.sample_weight = w;
  ::testing::internal::CaptureStderr();
  const History h = m.fit(x, y, fit);
  const Logs eval = m.evaluate(x, y, {.batch_size = batch, .sample_weight = w});
  (void)::testing::internal::GetCapturedStderr();
  Trained t;
  for (const auto& v : m.variables()) t.weights.push_back(v.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  t.eval_loss = eval.at("loss");
  t.weighted_accuracy = h.history.at("accuracy");
  t.eval_weighted_accuracy = eval.at("accuracy");
  return t;
}

Trained train(JitCompile mode, const std::vector<std::string>& devices, bool weighted = true) {
  const test::Classification d = test::random_classification(64, 12, 4, 3);
  MirroredStrategy strategy({.devices = devices});
  auto scope = strategy.scope();
  set_random_seed(9);
  Sequential m({layers::Dense(16, "relu", 12), layers::Dropout(0.2), layers::Dense(4, "softmax")});
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
  m.add_weighted_metrics({"accuracy"});
  m.set_jit_compile(mode);
  const Tensor w = test::random_uniform(Shape{64}, 5, 0.0f, 2.0f);
  return fit_and_evaluate(m, d.x, d.y, weighted ? w : Tensor(), 16);
}

}  // namespace

TEST(GpuSampleWeight, CapturedAndEagerStepsTrainTheCpusBitsOnWeightedData) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained unweighted = train(JitCompile::kOff, {"gpu:0"}, false);
  for (const std::string& devices : {std::string("gpu:0"), std::string("gpu:0x2")}) {
    SCOPED_TRACE(devices);
    const Trained captured =
        train(JitCompile::kOn, {devices});  // throws, naming why, where it cannot capture
    const Trained eager = train(JitCompile::kOff, {devices});
    EXPECT_EQ(captured.weights, eager.weights);
    EXPECT_EQ(captured.losses, eager.losses);
    EXPECT_EQ(captured.eval_loss, eager.eval_loss);
    EXPECT_EQ(captured.weighted_accuracy, eager.weighted_accuracy);
    EXPECT_EQ(captured.eval_weighted_accuracy, eager.eval_weighted_accuracy);
    EXPECT_NE(eager.weights, unweighted.weights) << "the weights must change the training";
    EXPECT_NE(eager.eval_weighted_accuracy, unweighted.eval_weighted_accuracy);
    if (devices == "gpu:0") {
      const Trained cpu = train(JitCompile::kOff, {"cpu:0"});
      EXPECT_EQ(cpu.weights, eager.weights);
      EXPECT_EQ(cpu.eval_loss, eager.eval_loss);
      EXPECT_EQ(cpu.weighted_accuracy, eager.weighted_accuracy);
      EXPECT_EQ(cpu.eval_weighted_accuracy, eager.eval_weighted_accuracy);
    }
  }
  if (gpus() >= 2) {
    const Trained two = train(JitCompile::kAuto, {"gpu:0", "gpu:1"});
    EXPECT_EQ(two.weights, train(JitCompile::kOff, {"gpu:0x2"}).weights);
  }
}

namespace {
// A tagger (a label per step) over padded token rows, Embedding(mask_zero=true): its loss and
// metrics weighed by the output's mask and by weights per step (sample_weights.hpp).
Trained train_tagger(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, steps = 6, vocab = 7;
  std::vector<float> tokens(static_cast<std::size_t>(n * steps), 0.0f);
  std::vector<std::int64_t> labels(tokens.size());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t t = 0; t < steps; ++t) {
      const auto at = static_cast<std::size_t>(i * steps + t);
      if (t < 2 + i % 4) tokens[at] = static_cast<float>(1 + (i * 3 + t * 5) % (vocab - 1));
      labels[at] = (i * 5 + t * 3) % vocab;
    }
  const Tensor x = Tensor::from_vector(tokens, Shape{n, steps}), y = Tensor::from_vector(labels, Shape{n, steps});
  const Tensor w = test::random_uniform(Shape{n, steps}, 6, 0.0f, 2.0f);
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(9);
  Sequential m({layers::Input({steps}), layers::Embedding(vocab, 8, true), layers::Dense(8, "relu"),
                layers::Dense(vocab, "softmax")});
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
  m.add_weighted_metrics({"accuracy"});
  m.set_jit_compile(mode);
  return fit_and_evaluate(m, x, y, w, 8);
}
}  // namespace

TEST(GpuSampleWeight, MaskedStepsWithWeightsPerStepTrainAsOnTheCpu) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_tagger(JitCompile::kOn, "gpu:0"), eager = train_tagger(JitCompile::kOff, "gpu:0");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
  EXPECT_EQ(captured.eval_loss, eager.eval_loss);
  EXPECT_EQ(captured.eval_weighted_accuracy, eager.eval_weighted_accuracy);
  const Trained cpu = train_tagger(JitCompile::kOff, "cpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(eager.weights, cpu.weights));
  EXPECT_NEAR(eager.eval_loss, cpu.eval_loss, 1e-5 * cpu.eval_loss);
  EXPECT_NEAR(eager.eval_weighted_accuracy, cpu.eval_weighted_accuracy, 1e-6);
}
