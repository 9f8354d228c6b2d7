// The rest of Keras 3's 1D convolution family (Conv1DTranspose, SeparableConv1D, DepthwiseConv1D,
// Cropping1D) and its remaining activations on a GPU: a sequence model of them trains the same bits
// in a captured step (jit_compile=True) as eagerly, and the CPU's to 1e-4; on gpu:0x2 too (the
// mirrored copies stay equal). CI runs them on emulated GPUs (gpu.emulated), which capture as real
// ones do.
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

// (10, 3) sequences -> Conv1D(strides 2) -> Conv1DTranspose(strides 2, output_padding) ->
// Cropping1D -> SeparableConv1D -> DepthwiseConv1D(multiplier 2) -> Dense layers of the new
// activations -> 3 classes; two epochs.
FitRun train_sequence_model(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, steps = 10, classes = 3;
  const Tensor x = test::random_uniform(Shape{n, steps, 3}, 7, -2.0f, 2.0f);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = (i * 5) % classes;
  const Tensor y = Tensor::from_vector(labels, Shape{n});
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(8);
  Sequential m({layers::Input({steps, 3}), layers::Conv1D(4, 3, "celu", "same", 2),  // 5 steps
                layers::Conv1DTranspose({.filters = 4, .kernel_size = 3, .strides = 2, .output_padding = 1,
                                         .activation = "squareplus"}),  // 12 steps
                layers::Cropping1D({1, 1}),
                layers::SeparableConv1D({.filters = 4, .kernel_size = 3, .padding = "same", .depth_multiplier = 2,
                                         .activation = "tanh_shrink"}),
                layers::DepthwiseConv1D({.kernel_size = 2, .strides = 2, .depth_multiplier = 2,
                                         .activation = "sparse_plus"}),
                layers::Flatten(), layers::Dense(8, "log_sigmoid"), layers::Dense(8, "soft_shrink"),
                layers::Dense(6, "hard_tanh"), layers::Dense(6, "sparse_sigmoid"), layers::Dense(6, "hard_shrink"),
                layers::Dense(classes, "softmax")});
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m.set_jit_compile(mode);
  return fit_quietly(m, x, y);
}

}  // namespace

TEST(GpuConv1DFamily, ASequenceModelTrainsAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const FitRun eager = expect_capture_changes_nothing(train_sequence_model, "gpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_near_cpu(eager, train_sequence_model(JitCompile::kOff, "cpu:0")));
}

TEST(GpuConv1DFamily, TwoReplicasTrainAsOneCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  expect_capture_changes_nothing(train_sequence_model, "gpu:0x2");
}
