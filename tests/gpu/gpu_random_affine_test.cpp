// RandomTranslation, RandomRotation and RandomZoom on a GPU: their draws are random_fill's uniform
// draws (uniform_like), keyed by the example's global index and the step, and affine_transform is
// composed of recorded ops, so a GPU draws and transforms what the CPU does, a second GPU given the
// second half of a batch draws that half's transforms, and a captured step (jit_compile=True)
// replays each step's draws and trains the eager run's bits. CI runs them on emulated GPUs
// (gpu.emulated), which capture as real ones do.
#include <algorithm>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/random_affine_layers.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

constexpr std::int64_t kSide = 6;

std::vector<layers::LayerPtr> augmentations() {
  return {layers::RandomTranslation({0.3f}, {-0.2f, 0.4f}, {.fill_mode = "wrap"}),
          layers::RandomRotation({0.5f}, {.fill_mode = "constant", .fill_value = 9.0f}),
          layers::RandomZoom({-0.4f, 0.5f}, std::vector<float>{0.3f}, {.interpolation = "nearest"}),
          layers::RandomZoom({0.4f}, std::nullopt, {.fill_mode = "nearest"})};
}

// (6, 6, 3) images in [20, 70] -> RandomTranslation -> RandomRotation -> RandomZoom -> Conv2D ->
// pooling -> Dense(2), on `devices` ("gpu:0", "gpu:0x2", "gpu:0,gpu:1").
FitRun train_augmented(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32;
  const Tensor x =
      add_scalar(scale(test::random_uniform(Shape{n, kSide, kSide, 3}, 5, 0.0f, 1.0f), 50.0f), 20.0f);
  const Tensor y = test::random_uniform(Shape{n, 2}, 6, 0.0f, 1.0f);
  std::vector<std::string> list;
  for (std::size_t at = 0; at <= devices.size();) {
    const std::size_t comma = std::min(devices.find(',', at), devices.size());
    list.push_back(devices.substr(at, comma - at));
    at = comma + 1;
  }
  MirroredStrategy strategy({.devices = list});
  auto scope = strategy.scope();
  set_random_seed(6);
  const KerasTensor in = Input({kSide, kSide, 3});
  const KerasTensor shifted = call(layers::RandomTranslation({0.2f}, {0.2f}, {.seed = 3}), in);
  const KerasTensor turned = call(layers::RandomRotation({0.1f}, {.fill_mode = "nearest"}), shifted);
  const KerasTensor zoomed =
      call(layers::RandomZoom({0.2f}, std::nullopt, {.interpolation = "nearest"}), turned);
  const KerasTensor conv =
      call(layers::Conv2D(4, {3, 3}, "relu"), call(layers::Rescaling(1.0f / 80), zoomed));
  Functional m(in, call(layers::Dense(2), call(layers::GlobalAveragePooling2D(), conv)));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}

std::string two_replicas() { return gpus() >= 2 ? "gpu:0,gpu:1" : "gpu:0x2"; }

}  // namespace

TEST(GpuRandomAffineLayers, ADeviceDrawsAndTransformsAsTheCpuAndASecondOneItsHalfOfTheBatch) {
  LOCKSTEP_REQUIRE_GPU();
  constexpr std::int64_t n = 16;
  const Tensor x = test::random_uniform(Shape{n, kSide, kSide, 3}, 7, 0.0f, 1.0f);
  const Tensor second_half = x.slice(n / 2, n).clone();
  const layers::CallContext train{.training = true, .seed = 5, .step = 3};
  layers::CallContext second = train;
  second.first_example = n / 2;
  for (const auto& l : augmentations()) {
    SCOPED_TRACE(l->class_name());
    l->build(Shape{-1, kSide, kSide, 3}, 8);
    const std::vector<float> cpu = l->call(x, train).to_vector<float>();
    std::vector<float> gpu;
    {
      OnGpu0 on;
      gpu = l->call(x.to(on.gpu), train).on_host().to_vector<float>();
    }
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) ASSERT_NEAR(gpu[i], cpu[i], 1e-5) << i;
    const Device other = Device::parse(gpus() >= 2 ? "gpu:1" : "gpu:0");
    const auto ctx = make_compute_context(other);
    ComputeScope scope(*ctx);
    const std::vector<float> half = l->call(second_half.to(other), second).on_host().to_vector<float>();
    EXPECT_EQ(half, std::vector<float>(gpu.begin() + static_cast<long>(gpu.size() / 2), gpu.end()));
  }
}

TEST(GpuRandomAffineLayers, TheyAreCapturedReplayEachStepsDrawsAndTrainAsOnTheCpu) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_augmented, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_augmented(JitCompile::kOff, "cpu:0")));
}

TEST(GpuRandomAffineLayers, TwoReplicasTrainAsOneDeviceAndCapturedAsEager) {
  LOCKSTEP_REQUIRE_GPU();
  const FitRun two = train_augmented(JitCompile::kOff, two_replicas());
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(two, train_augmented(JitCompile::kOff, "gpu:0")));
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (gpus() < 2 && refusal.empty()) expect_capture_changes_nothing(train_augmented, two_replicas());
}

// RandomCrop: its one window per batch is drawn on the device from the step's key (the batch's
// first example taken as 0), so a GPU crops where the CPU does, a second GPU given the second half
// of the batch takes the same window, and a captured step replays each step's window.
namespace {
FitRun train_cropped(JitCompile mode, const std::string& device) {
  const Tensor x = test::random_uniform(Shape{32, kSide, kSide, 3}, 9, 0.0f, 1.0f);
  const Tensor y = test::random_uniform(Shape{32, 2}, 10, 0.0f, 1.0f);
  MirroredStrategy strategy({.devices = {device}});
  auto scope = strategy.scope();
  set_random_seed(7);
  const KerasTensor in = Input({kSide, kSide, 3});
  const KerasTensor conv = call(layers::Conv2D(4, {3, 3}, "relu"), call(layers::RandomCrop(4, 5, 3), in));
  Functional m(in, call(layers::Dense(2), call(layers::GlobalAveragePooling2D(), conv)));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}
}  // namespace

TEST(GpuRandomAffineLayers, RandomCropTakesTheCpusWindowOnEachDeviceAndIsCaptured) {
  LOCKSTEP_REQUIRE_GPU();
  constexpr std::int64_t n = 8;
  const Tensor x = test::random_uniform(Shape{n, kSide, kSide, 3}, 11, 0.0f, 1.0f);
  const auto crop = layers::RandomCrop(4, 5);
  crop->build(Shape{-1, kSide, kSide, 3}, 8);
  for (std::uint64_t step = 0; step < 4; ++step) {
    const layers::CallContext train{.training = true, .seed = 5, .step = step};
    layers::CallContext second = train;
    second.first_example = n / 2;
    const std::vector<float> cpu = crop->call(x, train).to_vector<float>();
    OnGpu0 on;
    EXPECT_EQ(crop->call(x.to(on.gpu), train).on_host().to_vector<float>(), cpu) << step;
    const std::vector<float> half = crop->call(x.slice(n / 2, n).clone().to(on.gpu), second).on_host().to_vector<float>();
    EXPECT_EQ(half, std::vector<float>(cpu.begin() + static_cast<long>(cpu.size() / 2), cpu.end())) << step;
  }
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_cropped, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_cropped(JitCompile::kOff, "cpu:0")));
}
