// Convolutional networks on the GPU (cuDNN convolutions, lockstep's pooling kernels, BatchNorm
// from the generic kernels): N logical replicas with synchronized BatchNorm compute what one
// device does, the GPU what the CPU does, and Keras' simple convnet learns. Each GPU test has
// a NoDevice twin that runs the same task and thresholds on CPU devices, so the expectations
// are checked wherever the suite runs.
#include <random>

#include "common/relative_error.hpp"
#include "gpu_test_util.hpp"

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

// Steps on uneven batches (13 over 4 replicas; a batch of 3 leaves one replica none) under
// `strategy` (null: none, on the CPU); every variable, BatchNorm's moving statistics included.
std::vector<std::vector<float>> train_convnet(Strategy* strategy) {
  std::unique_ptr<Sequential> model;
  if (strategy) {
    auto scope = strategy->scope();
    model = make_convnet();
  } else {
    model = make_convnet();
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

void replicas_match_one_device(const std::string& one_device, const MirroredOptions& four) {
  OneDeviceStrategy one(one_device);
  const auto reference = train_convnet(&one);
  MirroredStrategy replicas(four);
  ASSERT_EQ(replicas.num_replicas_in_sync(), 4);
  EXPECT_LE(max_rel_diff(train_convnet(&replicas), reference), 1e-5);
  // And the device computes what the CPU does without a strategy, to float32 rounding.
  EXPECT_LE(max_rel_diff(reference, train_convnet(nullptr)), 1e-4);
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

TEST(GpuConvnet, TheSimpleConvnetLearnsOnTheGpu) {
  LOCKSTEP_REQUIRE_GPU();
  MirroredStrategy strategy({.devices = {"gpu:0x2"}});
  convnet_learns(strategy);
}

TEST(NoDevice, TheSimpleConvnetLearnsOnTwoCpuDevices) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  convnet_learns(strategy);
}
