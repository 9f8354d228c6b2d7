// Keras 3's other regularization layers and GroupNormalization / UnitNormalization on a GPU: a
// model of the spatial and alpha dropouts (the dropout kernel's masks) and the two normalisations
// trains the same bits in a captured step (jit_compile=True) as eagerly, and the CPU's to 1e-4;
// with GaussianNoise and GaussianDropout too (noise drawn on the device by random_fill, the step
// read from the step block) the step is captured, replays each step's noise (the captured run's
// bits are the eager run's) and trains the CPU's weights (the same noise on every backend). CI
// runs them on emulated GPUs (gpu.emulated), which capture as real ones do.
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/layers/group_normalization.hpp"
#include "lockstep/layers/regularization_layers.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

// (8, 6) sequences -> SpatialDropout1D -> Dense -> GroupNormalization -> AlphaDropout ->
// UnitNormalization [-> GaussianNoise -> GaussianDropout] -> Flatten -> Dense(3, softmax); two epochs.
FitRun train(JitCompile mode, const std::string& devices, bool gaussian) {
  constexpr std::int64_t n = 32;
  const Tensor x = test::random_uniform(Shape{n, 8, 6}, 5, -2.0f, 2.0f);
  std::vector<std::int64_t> yv(n);
  for (std::int64_t i = 0; i < n; ++i) yv[static_cast<std::size_t>(i)] = i % 3;
  const Tensor y = Tensor::from_vector(yv, {n});
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(6);
  std::vector<layers::LayerPtr> stack{layers::Input({8, 6}), layers::SpatialDropout1D(0.3f), layers::Dense(8, "tanh"),
                                      layers::GroupNormalization({.groups = 4}), layers::AlphaDropout(0.2f),
                                      layers::UnitNormalization()};
  if (gaussian) {
    stack.push_back(layers::GaussianNoise(0.2f));
    stack.push_back(layers::GaussianDropout(0.2f));
  }
  stack.push_back(layers::Flatten());
  stack.push_back(layers::Dense(3, "softmax"));
  Sequential m(stack, "regularized");
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}

}  // namespace

TEST(GpuRegularizationLayers, SpatialAndAlphaDropoutAndTheNormalisationsTrainAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const auto without_noise = [](JitCompile mode, const std::string& devices) { return train(mode, devices, false); };
  const FitRun eager = expect_capture_changes_nothing(without_noise, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, without_noise(JitCompile::kOff, "cpu:0")));
}

TEST(GpuRegularizationLayers, GaussianNoiseStepsAreCapturedReplayEachStepsNoiseAndTrainAsOnTheCpu) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const auto with_noise = [](JitCompile mode, const std::string& devices) { return train(mode, devices, true); };
  // jit_compile=True captures the step (it would refuse one that blocks capture) and its replays
  // draw each step's noise: a replay that froze the step's noise would train other weights.
  const FitRun eager = expect_capture_changes_nothing(with_noise, "gpu:0");
  EXPECT_EQ(train(JitCompile::kAuto, "gpu:0", true).jit_reason, "");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, with_noise(JitCompile::kOff, "cpu:0")));
}
