// Mixed precision on convnets: under mixed_float16 / mixed_bfloat16 convolution, pooling and
// BatchNormalization keep their activations in 16 bits, so one training step's activation memory
// (the allocator's peak minus what the device held before the step: weights, optimizer slots)
// is at most 0.6x float32's, for Keras' simple MNIST convnet (the CLI's --model cnn) and
// ResNet-20. Each device kind has its row: the CPU (NoDevice) and a GPU (emulated in CI:
// LOCKSTEP_EMULATED_GPUS, host memory with the CPU's kernels).
#include <random>

#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {
// Restores the float32 policy however a test ends: the global policy outlives a test.
struct PolicyGuard {
  explicit PolicyGuard(const std::string& name) { mixed_precision::set_global_policy(name); }
  ~PolicyGuard() { mixed_precision::set_global_policy("float32"); }
};

struct Task {
  std::string model;
  Shape image;
  std::int64_t batch;
};
const Task kCnn{"cnn", Shape{28, 28, 1}, 64};
const Task kResNet20{"resnet20", Shape{32, 32, 3}, 32};

std::unique_ptr<Model> make_model(const Task& t) {
  if (t.model == "cnn")  // tools/lockstep's --model cnn: Keras' simple MNIST convnet
    return std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Input(t.image), layers::Conv2D(32, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
        layers::Conv2D(64, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}), layers::Flatten(), layers::Dropout(0.5f),
        layers::Dense(10, "softmax")});
  return applications::ResNet20({.input_shape = t.image, .classes = 10});
}

// Bytes one training step adds to what `device` holds, at its peak, under `policy`.
std::uint64_t step_activation_bytes(const std::string& device, const Task& t, const std::string& policy) {
  const PolicyGuard guard(policy);
  set_random_seed(3);
  OneDeviceStrategy strategy(device);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = make_model(t);
    model->compile("adam", "sparse_categorical_crossentropy");
    // One eager step's activations: a captured step (jit_compile) keeps the same in its graph's
    // pool for good, beside static copies of its inputs, whatever the policy.
    model->set_jit_compile(JitCompile::kOff);
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> xv(static_cast<std::size_t>(t.batch * t.image.numel()));
  for (auto& v : xv) v = u(rng);
  std::vector<std::int64_t> yv(static_cast<std::size_t>(t.batch));
  for (std::size_t i = 0; i < yv.size(); ++i) yv[i] = static_cast<std::int64_t>(i % 10);
  std::vector<std::int64_t> dims{t.batch};
  dims.insert(dims.end(), t.image.dims().begin(), t.image.dims().end());
  const Tensor x = Tensor::from_vector(xv, Shape(dims)), y = Tensor::from_vector(yv, Shape{t.batch});
  model->train_step(x, y);  // builds the model, makes the optimizer's slots, warms the caches
  ComputeContext& ctx = strategy.context(0);
  const std::uint64_t before = context_bytes_in_use(ctx);
  reset_context_peak_bytes(ctx);
  model->train_step(x, y);
  return context_peak_bytes(ctx) - before;
}

void expect_sixteen_bit_saves(const std::string& device, const Task& t) {
  const double f32 = static_cast<double>(step_activation_bytes(device, t, "float32"));
  for (const char* policy : {"mixed_float16", "mixed_bfloat16"}) {
    const double ratio = static_cast<double>(step_activation_bytes(device, t, policy)) / f32;
    EXPECT_LE(ratio, 0.6) << t.model << " on " << device << " under " << policy << ": " << ratio
                          << "x float32's " << f32 / (1 << 20) << " MiB";
    std::printf("%s on %s, %s: activation memory %.3fx float32's (%.2f MiB)\n", t.model.c_str(), device.c_str(),
                policy, ratio, f32 / (1 << 20));
  }
}
}  // namespace

TEST(NoDevice, SixteenBitConvnetActivationsTakeAtMostSixTenthsOfFloat32sOnTheCpu) {
  expect_sixteen_bit_saves("cpu:0", kCnn);
  expect_sixteen_bit_saves("cpu:0", kResNet20);
}

TEST(GpuMixedPrecision, SixteenBitConvnetActivationsTakeAtMostSixTenthsOfFloat32s) {
  LOCKSTEP_REQUIRE_GPU();
  expect_sixteen_bit_saves("gpu:0", kCnn);
  expect_sixteen_bit_saves("gpu:0", kResNet20);
}
