// Keras 3's advanced activation layers, its other activations and SeparableConv2D on a GPU: a
// convnet of them trains the same bits in a captured step (jit_compile=True) as eagerly, and the
// CPU's to 1e-4 (their scalar constants are filled on the device, inside the capture). CI runs
// them on emulated GPUs (gpu.emulated), which capture as real ones do.
#include <cmath>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/layers/activation_layers.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
};

Trained train_activation_convnet(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, classes = 3;
  const Tensor x = test::random_uniform(Shape{n, 6, 6, 2}, 11, -2.0f, 2.0f);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = (i * 7) % classes;
  const Tensor y = Tensor::from_vector(labels, Shape{n});
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(12);
  Sequential m({layers::Input({6, 6, 2}),
                layers::SeparableConv2D({.filters = 4, .kernel_size = {3, 3}, .padding = "same",
                                         .depth_multiplier = 2, .activation = "elu"}),
                layers::PReLU("uniform", {1, 2}), layers::ReLU(1.5f, 0.1f, 0.05f),
                layers::SeparableConv2D({.filters = 3, .kernel_size = {2, 2}, .strides = {2, 2}, .activation = "mish"}),
                layers::Flatten(), layers::Dense(8, "softplus"), layers::LeakyReLU(), layers::ELU(0.5f),
                layers::Dense(6, "hard_silu"), layers::Dense(classes, "softmax")});
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m.set_jit_compile(mode);
  ::testing::internal::CaptureStderr();
  const History h = m.fit(x, y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  (void)::testing::internal::GetCapturedStderr();
  Trained t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  return t;
}

}  // namespace

TEST(GpuActivationLayers, AConvnetOfThemTrainsAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_activation_convnet(JitCompile::kOn, "gpu:0");
  const Trained eager = train_activation_convnet(JitCompile::kOff, "gpu:0");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
  const Trained cpu = train_activation_convnet(JitCompile::kOff, "cpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(eager.weights, cpu.weights));
  for (std::size_t e = 0; e < cpu.losses.size(); ++e) EXPECT_NEAR(eager.losses[e], cpu.losses[e], 1e-5 * cpu.losses[e]);
}
