// Keras' Masking layer and Softmax's mask on a GPU: a Masking tagger (its mask on the loss and the
// metrics) trains the same bits in a captured step (jit_compile=True) as eagerly, and the CPU's
// to 1e-4; a Softmax given a mask predicts the CPU's values. CI runs them on emulated GPUs
// (gpu.emulated), which capture as real ones do.
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
  std::vector<double> losses;
  double eval_loss = 0, eval_accuracy = 0;
};

// Float steps (3 features) with trailing padding of mask_value 0.5, a label per step;
// Input -> Masking(0.5) -> Dense(8, relu) -> Dense(vocab, softmax), two epochs and an evaluate.
Trained train_masking_tagger(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, steps = 6, vocab = 5;
  Tensor x = test::random_uniform(Shape{n, steps, 3}, 7, -1.0f, 1.0f);
  std::vector<float> v = x.to_vector<float>();
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n * steps));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t t = 0; t < steps; ++t) {
      labels[static_cast<std::size_t>(i * steps + t)] = (i * 5 + t * 3) % vocab;
      if (t >= 2 + i % 4)
        for (std::int64_t f = 0; f < 3; ++f) v[static_cast<std::size_t>((i * steps + t) * 3 + f)] = 0.5f;
    }
  x = Tensor::from_vector(v, Shape{n, steps, 3});
  const Tensor y = Tensor::from_vector(labels, Shape{n, steps});
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(9);
  Sequential m({layers::Input({steps, 3}), layers::Masking(0.5f), layers::Dense(8, "relu"),
                layers::Dense(vocab, "softmax")});
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m.set_jit_compile(mode);
  ::testing::internal::CaptureStderr();
  const History h = m.fit(x, y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  const Logs eval = m.evaluate(x, y, {.batch_size = 8});
  (void)::testing::internal::GetCapturedStderr();
  Trained t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  t.eval_loss = eval.at("loss");
  t.eval_accuracy = eval.at("accuracy");
  return t;
}

}  // namespace

TEST(GpuMaskLayers, AMaskingTaggerTrainsAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_masking_tagger(JitCompile::kOn, "gpu:0");
  const Trained eager = train_masking_tagger(JitCompile::kOff, "gpu:0");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
  EXPECT_EQ(captured.eval_loss, eager.eval_loss);
  const Trained cpu = train_masking_tagger(JitCompile::kOff, "cpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(eager.weights, cpu.weights));
  EXPECT_NEAR(eager.eval_loss, cpu.eval_loss, 1e-5 * cpu.eval_loss);
  EXPECT_NEAR(eager.eval_accuracy, cpu.eval_accuracy, 1e-6);
}

TEST(GpuMaskLayers, AMaskedSoftmaxPredictsTheCpusValues) {
  LOCKSTEP_REQUIRE_GPU();
  const auto predict_on = [](const std::string& device) {
    MirroredStrategy strategy({.devices = {device}});
    auto scope = strategy.scope();
    set_random_seed(4);
    const KerasTensor x = Input({3, 4}), m = Input({1, 4});
    Functional model({x, m}, call(layers::Softmax(), call(layers::Dense(4), x), CallKwargs{.mask = &m}));
    const Tensor scores = test::random_uniform(Shape{8, 3, 4}, 3, -2.0f, 2.0f);
    std::vector<float> mask(32, 1.0f);
    for (std::size_t i = 0; i < mask.size(); i += 3) mask[i] = 0.0f;
    for (std::size_t i = 4; i < 8; ++i) mask[i] = 0.0f;  // example 1 masked whole: all zeros
    return model.predict(std::vector<Tensor>{scores, Tensor::from_vector(mask, Shape{8, 1, 4})}).front()
        .to_vector<float>();
  };
  const std::vector<float> gpu = predict_on("gpu:0"), cpu = predict_on("cpu:0");
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-6f) << "at " << i;
  for (std::size_t i = 12; i < 24; ++i) EXPECT_EQ(gpu[i], 0.0f) << "at " << i;
}
