// Keras 3's preprocessing layers on a GPU: Normalization (adapted), RandomFlip, Resizing (bilinear
// up, nearest down) and CenterCrop in front of a convnet train the same bits in a captured step
// (jit_compile=True) as eagerly (RandomFlip's coins read the step on the device, as Dropout's mask does), and
// the CPU's to 1e-4; on gpu:0x2 too. CI runs them on emulated GPUs (gpu.emulated), which capture as real ones
// do.
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

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
  std::string jit_reason;
};

Trained train_augmented(JitCompile mode, const std::string& devices) {
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
  ::testing::internal::CaptureStderr();
  const History h = m.fit(x, y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  (void)::testing::internal::GetCapturedStderr();
  Trained t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  t.jit_reason = m.jit_compile_reason();
  return t;
}

}  // namespace

TEST(GpuPreprocessingLayers, TheyTrainAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_augmented(JitCompile::kOn, "gpu:0");
  const Trained eager = train_augmented(JitCompile::kOff, "gpu:0");
  EXPECT_EQ(captured.jit_reason, "");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
  const Trained cpu = train_augmented(JitCompile::kOff, "cpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(eager.weights, cpu.weights));
  for (std::size_t e = 0; e < cpu.losses.size(); ++e)
    EXPECT_NEAR(eager.losses[e], cpu.losses[e], 1e-5 * cpu.losses[e]);
}

TEST(GpuPreprocessingLayers, TwoReplicasTrainAsOneCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_augmented(JitCompile::kOn, "gpu:0x2");
  const Trained eager = train_augmented(JitCompile::kOff, "gpu:0x2");
  EXPECT_EQ(captured.jit_reason, "");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
}
