// The decoder side on a GPU: a U-Net-like autoencoder (Conv2DTranspose with strides and
// output_padding, UpSampling2D nearest and bilinear, Cropping2D, Concatenate) trains the same bits
// in a captured step (jit_compile=True) as eagerly, and the CPU's to 1e-4; on gpu:0x2 too (the
// mirrored copies stay equal). CI runs them on emulated GPUs (gpu.emulated), which capture as
// real ones do.
#include <cmath>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;
using lockstep::layers::Pair;

namespace {

// (8, 8, 1) images -> Conv2D -> MaxPooling2D -> Conv2DTranspose(strides 2) beside UpSampling2D
// (nearest and bilinear) and the cropped input, concatenated -> Conv2DTranspose(output_padding)
// -> Cropping2D -> Conv2D(1, sigmoid); mean squared error against the input, two epochs.
FitRun train_unet(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, side = 8;
  const Tensor x = test::random_uniform(Shape{n, side, side, 1}, 5, 0.0f, 1.0f);
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(6);
  const KerasTensor in = Input({side, side, 1});
  const KerasTensor c1 = call(layers::Conv2D(4, {3, 3}, "relu", "same"), in);
  const KerasTensor b = call(layers::MaxPooling2D(), c1);  // 4x4
  const KerasTensor up = call(layers::Conv2DTranspose(4, {3, 3}, "relu", "same", {2, 2}), b);
  const KerasTensor merged =
      call(layers::Concatenate(),
           {up, call(layers::UpSampling2D(), b), call(layers::UpSampling2D({2, 2}, "bilinear"), b),
            call(layers::Cropping2D({Pair{0, 0}, Pair{0, 0}}), c1)});
  const KerasTensor wide = call(layers::Conv2DTranspose({.filters = 4,
                                                         .kernel_size = {3, 3},
                                                         .strides = {2, 2},
                                                         .output_padding = Pair{1, 1},
                                                         .activation = "tanh"}),
                                merged);  // 18x18
  const KerasTensor cropped = call(layers::Cropping2D({Pair{1, 1}, Pair{1, 1}}), wide);
  Functional m(in, call(layers::Conv2D(1, {3, 3}, "sigmoid", "same", {2, 2}), cropped));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, x);
}

}  // namespace

TEST(GpuDecoderLayers, AUNetTrainsAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_unet, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_unet(JitCompile::kOff, "cpu:0")));
}

TEST(GpuDecoderLayers, TwoReplicasTrainAsOneCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  expect_capture_changes_nothing(train_unet, "gpu:0x2");
}
