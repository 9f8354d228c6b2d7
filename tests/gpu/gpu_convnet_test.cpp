// Convolutional networks on the GPU (cuDNN convolutions, lockstep's pooling kernels, BatchNorm
// from the generic kernels): N logical replicas with synchronized BatchNorm compute what one
// device does, the GPU what the CPU does (and so for a sequence convnet of Conv1D and the 1D and
// global max pooling layers), and Keras' simple convnet learns. Each GPU test has a NoDevice twin
// that runs the same task and thresholds on CPU devices, so the expectations are checked wherever
// the suite runs. Under mixed precision a real GPU runs the convolutions in 16 bits (cuDNN,
// float32 accumulation), with no widening casts, and the convnet still learns.
#include <random>

#include "common/relative_error.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/kernel_launches.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;
using lockstep::test::max_rel_diff;

namespace {
constexpr std::int64_t kSide = 8;

// Images of kSide x kSide x 2: noise plus a bright 3x3 patch in one of four quadrants, the label.
struct Images {
  Tensor x, y;
};
Images make_images(std::int64_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 0.3f);
  std::vector<float> xv(static_cast<std::size_t>(n * kSide * kSide * 2));
  std::vector<std::int64_t> yv(static_cast<std::size_t>(n));
  for (auto& v : xv) v = u(rng);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t q = static_cast<std::int64_t>(rng() % 4), oy = (q / 2) * 4 + static_cast<std::int64_t>(rng() % 2),
                       ox = (q % 2) * 4 + static_cast<std::int64_t>(rng() % 2);
    yv[static_cast<std::size_t>(i)] = q;
    for (std::int64_t y = oy; y < oy + 3; ++y)
      for (std::int64_t x = ox; x < ox + 3; ++x) xv[static_cast<std::size_t>(((i * kSide + y) * kSide + x) * 2)] += 0.7f;
  }
  return {Tensor::from_vector(xv, {n, kSide, kSide, 2}), Tensor::from_vector(yv, {n})};
}

// A 'same' stride-2 convolution (asymmetric padding: cuDNN's symmetric padding cannot give its
// output size), a dilated one, synchronized BatchNorm, max and average pooling.
std::unique_ptr<Sequential> make_convnet() {
  set_random_seed(7);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Input({kSide, kSide, 2}), layers::Conv2D(6, {3, 3}, "relu", "same"),
      layers::BatchNormalization({.momentum = 0.9f, .synchronized = true}), layers::MaxPooling2D({2, 2}),
      layers::Conv2D({.filters = 8, .kernel_size = {2, 2}, .strides = {2, 2}, .padding = "same", .activation = "relu"}),
      layers::Conv2D({.filters = 8, .kernel_size = {2, 2}, .padding = "same", .dilation_rate = {2, 2}}),
      layers::AveragePooling2D({2, 2}, std::nullopt, "same"), layers::GlobalAveragePooling2D(),
      layers::Dense(4, "softmax")});
  m->compile(optimizers::SGD(0.05, 0.9), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// The same images as a sequence of kSide steps of 2 * kSide features: a causal dilated Conv1D,
// max and 'same' average pooling over the steps, a strided grouped Conv1D, then GlobalMaxPooling2D
// and GlobalMaxPooling1D (on reshaped views).
std::unique_ptr<Sequential> make_sequence_convnet() {
  set_random_seed(7);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Input({kSide, kSide, 2}), layers::Reshape(Shape{kSide, kSide * 2}),
      layers::Conv1D({.filters = 8, .kernel_size = 3, .padding = "causal", .dilation_rate = 2, .activation = "relu"}),
      layers::MaxPooling1D(2),
      layers::Conv1D({.filters = 8, .kernel_size = 2, .strides = 2, .padding = "same", .groups = 2}),
      layers::AveragePooling1D(2, 1, "same"), layers::Reshape(Shape{2, 2, 4}), layers::GlobalMaxPooling2D(true),
      layers::Reshape(Shape{1, 4}), layers::GlobalMaxPooling1D(), layers::Dense(4, "softmax")});
  m->compile(optimizers::SGD(0.05, 0.9), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

using MakeModel = std::unique_ptr<Sequential> (*)();

// Steps on uneven batches (13 over 4 replicas; a batch of 3 leaves one replica none) under
// `strategy` (null: none, on the CPU); every variable, BatchNorm's moving statistics included.
std::vector<std::vector<float>> train_convnet(Strategy* strategy, MakeModel make) {
  std::unique_ptr<Sequential> model;
  if (strategy) {
    auto scope = strategy->scope();
    model = make();
  } else {
    model = make();
  }
  unsigned seed = 20;
  for (std::int64_t n : {16, 13, 16, 3, 12}) {
    const Images b = make_images(n, seed++);
    model->train_step(b.x, b.y);
  }
  if (strategy) strategy->check_mirrored(model->variables());
  std::vector<std::vector<float>> w;
  for (const auto& v : model->variables()) w.push_back(v.value().to_vector<float>());
  return w;
}

void replicas_match_one_device(const std::string& one_device, const MirroredOptions& four,
                               MakeModel make = make_convnet) {
  OneDeviceStrategy one(one_device);
  const auto reference = train_convnet(&one, make);
  MirroredStrategy replicas(four);
  ASSERT_EQ(replicas.num_replicas_in_sync(), 4);
  EXPECT_LE(max_rel_diff(train_convnet(&replicas, make), reference), 1e-5);
  // And the device computes what the CPU does without a strategy, to float32 rounding.
  EXPECT_LE(max_rel_diff(reference, train_convnet(nullptr, make)), 1e-4);
}

// fit() of Keras' simple convnet shape (Conv-MaxPool-Conv-MaxPool-Flatten-Dropout-Dense) on the
// quadrant task; it must learn it.
void convnet_learns(MirroredStrategy& strategy) {
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    set_random_seed(3);
    model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Input({kSide, kSide, 2}), layers::Conv2D(16, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
        layers::Conv2D(16, {2, 2}, "relu"), layers::MaxPooling2D({2, 2}), layers::Flatten(), layers::Dropout(0.5),
        layers::Dense(4, "softmax")});
    model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  }
  const Images train = make_images(2048, 1), test = make_images(512, 2);
  model->fit(train.x, train.y, {.epochs = 6, .batch_size = 64, .verbose = 0});
  EXPECT_GT(model->evaluate(test.x, test.y, {.batch_size = 256}).at("accuracy"), 0.9);  // chance: 0.25
}
}  // namespace

TEST(GpuConvnet, FourLogicalReplicasWithSyncBatchNormComputeWhatOneDeviceWould) {
  LOCKSTEP_REQUIRE_GPU();
  replicas_match_one_device("gpu:0", {.devices = {"gpu:0x4"}});
}

TEST(NoDevice, ConvnetOnFourCpuDevicesComputesWhatOneDeviceWould) {
  replicas_match_one_device("cpu:0", {.num_cpu_devices = 4});
}

TEST(GpuConvnet, ASequenceConvnetOnFourLogicalReplicasComputesWhatOneDeviceWould) {
  LOCKSTEP_REQUIRE_GPU();
  replicas_match_one_device("gpu:0", {.devices = {"gpu:0x4"}}, make_sequence_convnet);
}

TEST(NoDevice, ASequenceConvnetOnFourCpuDevicesComputesWhatOneDeviceWould) {
  replicas_match_one_device("cpu:0", {.num_cpu_devices = 4}, make_sequence_convnet);
}

TEST(GpuConvnet, TheSimpleConvnetLearnsOnTheGpu) {
  LOCKSTEP_REQUIRE_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  convnet_learns(strategy);
}

TEST(NoDevice, TheSimpleConvnetLearnsOnTwoCpuDevices) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  convnet_learns(strategy);
}

namespace {
// Launches of `kernel` and of casts while f runs on gpu:0.
struct Launches {
  std::uint64_t kernel = 0, casts = 0;
};
template <typename F>
Launches launches_of(const Device& gpu, const std::string& kernel, F&& f) {
  const std::uint64_t k0 = detail::kernel_launches(gpu, kernel), c0 = detail::kernel_launches(gpu, "cast");
  f();
  return {detail::kernel_launches(gpu, kernel) - k0, detail::kernel_launches(gpu, "cast") - c0};
}

// Restores the float32 policy however a test ends: the global policy outlives a test.
struct PolicyGuard {
  explicit PolicyGuard(const std::string& name) { mixed_precision::set_global_policy(name); }
  ~PolicyGuard() { mixed_precision::set_global_policy("float32"); }
};
}  // namespace

// cuDNN's 16-bit convolutions: each op is one kernel launch in the tensors' own dtype, with no
// cast around it (the CPU and emulated GPUs widen to float32: casts in and out).
TEST(GpuConvnet, SixteenBitConvolutionsRunInTheirOwnDtypeWithoutWidening) {
  LOCKSTEP_REQUIRE_REAL_GPU();
  const OnGpu0 on;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    ASSERT_TRUE(backend::supports(DeviceKind::kCuda, dt, backend::KernelOp::kConv2d));
    const Images b = make_images(16, 9);
    const Tensor x = b.x.to(on.gpu).to(dt);
    const Tensor k = Tensor::full({3, 3, 2, 8}, 0.1f).to(on.gpu).to(dt), bias = Tensor::full({8}, 0.5f).to(on.gpu).to(dt);
    const Conv2dOptions o{.activation = FusedActivation::kRelu};
    Tensor y, dx, dw;
    (void)conv2d(x, k, bias, o).to(DType::kF32).to_vector<float>();  // warm-up: plans and algorithms chosen
    const Launches fwd = launches_of(on.gpu, "conv2d", [&] { y = conv2d(x, k, bias, o); });
    const Launches bwd_data =
        launches_of(on.gpu, "conv2d_backward_data", [&] { dx = conv2d_input_grad(k, y, x.shape(), o); });
    const Launches bwd_weights =
        launches_of(on.gpu, "conv2d_backward_weights", [&] { dw = conv2d_kernel_grad(x, y, k.shape(), true, o)[0]; });
    EXPECT_EQ(fwd.kernel, 1u);
    EXPECT_EQ(bwd_data.kernel, 1u);
    EXPECT_EQ(bwd_weights.kernel, 1u);
    EXPECT_EQ(fwd.casts + bwd_data.casts + bwd_weights.casts, 0u) << detail::kernel_launches_by_kernel(on.gpu);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(dx.dtype(), dt);
    EXPECT_EQ(dw.dtype(), dt);
    // Against float32's convolution of the same (16-bit) values: every output is relu(sum + 0.5) > 0.
    const Tensor want = conv2d(x.to(DType::kF32), k.to(DType::kF32), bias.to(DType::kF32), o);
    EXPECT_LE(max_rel_diff({y.to(DType::kF32).to_vector<float>()}, {want.to_vector<float>()}), 1e-2);
  }
}

// Keras' simple convnet shape under mixed_bfloat16 on gpu:0: a step runs both convolutions in
// bfloat16 (launches counted on a real GPU) and fit's loss falls.
TEST(GpuConvnet, AMixedBfloat16ConvnetTrainsOnTheGpu) {
  LOCKSTEP_REQUIRE_GPU();
  const PolicyGuard policy("mixed_bfloat16");
  OneDeviceStrategy strategy("gpu:0");
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    set_random_seed(3);
    model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Input({kSide, kSide, 2}), layers::Conv2D(16, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
        layers::Conv2D(16, {2, 2}, "relu"), layers::Flatten(), layers::Dense(4, "softmax")});
    model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  }
  const Images train = make_images(1024, 1);
  const History h = model->fit(train.x, train.y, {.epochs = 4, .batch_size = 64, .verbose = 0});
  const std::vector<double>& loss = h.history.at("loss");
  EXPECT_LT(loss.back(), 0.5 * loss.front()) << "loss by epoch: " << loss.front() << " ... " << loss.back();
  if (backend::device_kind(DeviceKind::kCuda).emulated()) return;  // the CPU's kernels: widened
  const Device gpu = Device::parse("gpu:0");
  const Images b = make_images(64, 4);
  model->train_step(b.x, b.y);  // this input's step captured (jit_compile) before it is counted
  const Launches step = launches_of(gpu, "conv2d", [&] { model->train_step(b.x, b.y); });
  EXPECT_EQ(step.kernel, 2u) << detail::kernel_launches_by_kernel(gpu);
  EXPECT_TRUE(backend::supports(DeviceKind::kCuda, DType::kBF16, backend::KernelOp::kConv2d));
}
