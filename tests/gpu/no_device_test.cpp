// What a machine without a GPU (or a build without CUDA) must say when asked for one: a clear
// error naming the device, never a crash. On a GPU machine the same holds one past the last GPU.
#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
// The first GPU index that does not exist here.
Device missing_gpu() { return Device{DeviceKind::kCuda, gpus()}; }
}  // namespace

TEST(NoDevice, ReportsHowManyGpusAreVisible) {
  // scripts/gpu_check.sh and tests/gpu/check_skip.sh read this line.
  std::printf("GPUs visible: %d\n", gpus());
  const std::string stack = gpu_runtime_summary();  // scripts/gpu_check.sh records it
  if (!stack.empty()) std::printf("GPU stack: %s\n", stack.c_str());
  EXPECT_EQ(stack.empty(), !backend::backend_available(DeviceKind::kCuda)) << stack;
  EXPECT_EQ(gpus() > 0, backend::list_local_devices().front().device.kind == DeviceKind::kCuda);
}

TEST(NoDevice, AMissingGpuIsAValueErrorNamingIt) {
  const Device d = missing_gpu();
  const std::string name = d.str();
  try {
    (void)make_compute_context(d);
    FAIL() << "made a context on " << name;
  } catch (const ValueError& e) {
    EXPECT_TRUE(has(e.what(), name)) << e.what();
    EXPECT_TRUE(has(e.what(), "does not exist") || has(e.what(), "without CUDA")) << e.what();
  }
  const Tensor t = Tensor::from_vector<float>({1, 2}, {2});
  const std::string to_err = message_of([&] { (void)t.to(d); });
  EXPECT_TRUE(has(to_err, name)) << to_err;
  const std::string mirrored = message_of([&] { distribute::MirroredStrategy s({.devices = {name}}); });
  EXPECT_TRUE(has(mirrored, name) && has(mirrored, "does not exist")) << mirrored;
  const std::string logical = message_of([&] { distribute::MirroredStrategy s({.devices = {name + "x4"}}); });
  EXPECT_TRUE(has(logical, name) && has(logical, "does not exist")) << logical;
  const std::string one = message_of([&] { distribute::OneDeviceStrategy s(name); });
  EXPECT_TRUE(has(one, name)) << one;
}

TEST(NoDevice, MalformedLogicalDevicesAreNamed) {
  for (const char* bad : {"gpu:0x0", "gpu:0x", "gpu:0xq", "gpu:0x65"}) {
    const std::string err = message_of([&] { distribute::MirroredStrategy s({.devices = {bad}}); });
    EXPECT_TRUE(has(err, bad)) << bad << ": " << err;
  }
  const std::string mixed = message_of([&] { distribute::MirroredStrategy s({.devices = {"cpu:0", "gpu:0"}}); });
  EXPECT_TRUE(has(mixed, "mix")) << mixed;
}

TEST(NoDevice, NcclTakesOnlyDistinctGpus) {
  using distribute::CollectiveImplementation;
  const std::string cpus = message_of([] {
    (void)distribute::make_collective_group(CollectiveImplementation::kNccl, 2,
                                            {.devices = {Device{DeviceKind::kCpu, 0}, Device{DeviceKind::kCpu, 1}}});
  });
  EXPECT_TRUE(has(cpus, "NCCL")) << cpus;
  const std::string count = message_of(
      [] { (void)distribute::make_collective_group(CollectiveImplementation::kNccl, 2, {.devices = {}}); });
  EXPECT_TRUE(has(count, "NCCL")) << count;
}
