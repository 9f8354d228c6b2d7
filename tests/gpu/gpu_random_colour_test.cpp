// RandomContrast and RandomBrightness on a GPU: their per-image factors are random_fill's uniform
// draws (uniform), the step read from the step block, so a captured step (jit_compile=True)
// replays each step's factors and trains the eager run's bits, and the CPU's to 1e-4; on gpu:0x2
// too. CI runs them on emulated GPUs (gpu.emulated), which capture as real ones do.
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

// (6, 6, 3) images in [20, 70] -> RandomContrast -> RandomBrightness -> Conv2D -> pooling -> Dense(2).
FitRun train_coloured(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, side = 6;
  const Tensor x = add_scalar(scale(test::random_uniform(Shape{n, side, side, 3}, 5, 0.0f, 1.0f), 50.0f), 20.0f);
  const Tensor y = test::random_uniform(Shape{n, 2}, 6, 0.0f, 1.0f);
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(6);
  const KerasTensor in = Input({side, side, 3});
  const KerasTensor contrast = call(layers::RandomContrast({0.4f, 0.5f}, {0.0f, 80.0f}), in);
  const KerasTensor bright = call(layers::RandomBrightness({0.2f}, {0.0f, 80.0f}, 3), contrast);
  const KerasTensor conv = call(layers::Conv2D(4, {3, 3}, "relu"), call(layers::Rescaling(1.0f / 80), bright));
  Functional m(in, call(layers::Dense(2), call(layers::GlobalAveragePooling2D(), conv)));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}

}  // namespace

TEST(GpuRandomColourLayers, TheyAreCapturedReplayEachStepsFactorsAndTrainAsOnTheCpu) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_coloured, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_coloured(JitCompile::kOff, "cpu:0")));
}

TEST(GpuRandomColourLayers, TwoReplicasCapturedOrNotTrainTheSameBits) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  expect_capture_changes_nothing(train_coloured, "gpu:0x2");
}
