// Keras 3's preprocessing layers on a GPU: Normalization (adapted), RandomFlip, Resizing (bilinear
// up, nearest down; bicubic, lanczos3 / 5 and area with UpSampling2D's) and CenterCrop in front of a convnet
// train the same bits in a captured step (jit_compile=True) as eagerly (RandomFlip's coins read the step on
// the device, as Dropout's mask does), and the CPU's to 1e-4; on gpu:0x2 too. CI runs them on emulated GPUs
// (gpu.emulated), which capture as real ones do.
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

FitRun train_augmented(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, side = 6;
  const Tensor x =
      add_scalar(scale(test::random_uniform(Shape{n, side, side, 3}, 5, 0.0f, 1.0f), 50.0f), 20.0f);
  const Tensor y = test::random_uniform(Shape{n, 2}, 6, 0.0f, 1.0f);
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(6);
  auto norm = layers::Normalization();
  dynamic_cast<layers::NormalizationLayer&>(*norm).adapt(x);
  const KerasTensor in = Input({side, side, 3});
  const KerasTensor flipped = call(layers::RandomFlip("horizontal"), call(norm, in));
  const KerasTensor both = call(layers::RandomFlip("vertical", 9), flipped);
  const KerasTensor resized = call(layers::Resizing(5, 5, "nearest"), call(layers::Resizing(9, 8), both));
  const KerasTensor conv = call(layers::Conv2D(4, {3, 3}, "relu"), call(layers::CenterCrop(4, 4), resized));
  Functional m(in, call(layers::Dense(2), call(layers::GlobalAveragePooling2D(), conv)));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}

// resize_images' other interpolations behind a trained 1x1 convolution (so that their gradients
// reach it): Resizing bicubic, lanczos5 then lanczos3, and area after UpSampling2D lanczos3 and
// bicubic, concatenated.
FitRun train_resized(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 16, side = 6;
  const Tensor x = test::random_uniform(Shape{n, side, side, 3}, 7, 0.0f, 1.0f);
  const Tensor y = test::random_uniform(Shape{n, 2}, 8, 0.0f, 1.0f);
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(7);
  const KerasTensor in = Input({side, side, 3});
  const KerasTensor mixed = call(layers::Conv2D(3, {1, 1}, "tanh"), in);
  const KerasTensor merged =
      call(layers::Concatenate(),
           {call(layers::Resizing(5, 5, "bicubic"), mixed),
            call(layers::Resizing(5, 5, "lanczos3"), call(layers::Resizing(9, 7, "lanczos5"), mixed)),
            call(layers::Resizing(5, 5, "area"), call(layers::UpSampling2D({2, 2}, "lanczos3"), mixed)),
            call(layers::Resizing(5, 5, "area"), call(layers::UpSampling2D({2, 1}, "bicubic"), mixed))});
  const KerasTensor conv = call(layers::Conv2D(4, {3, 3}, "relu"), merged);
  Functional m(in, call(layers::Dense(2), call(layers::GlobalAveragePooling2D(), conv)));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}

}  // namespace

TEST(GpuPreprocessingLayers, EveryResizeInterpolationTrainsAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_resized, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_resized(JitCompile::kOff, "cpu:0")));
  expect_capture_changes_nothing(train_resized, "gpu:0x2");
}

TEST(GpuPreprocessingLayers, TheyTrainAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_augmented, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_augmented(JitCompile::kOff, "cpu:0")));
}

TEST(GpuPreprocessingLayers, TwoReplicasTrainAsOneCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  expect_capture_changes_nothing(train_augmented, "gpu:0x2");
}
