// GPU memory: the caching allocator, its limit and out-of-memory errors, the DeviceOps, and
// tensors read from the wrong thread. Skipped without a GPU.
#include <cstring>

#include "backend/context.hpp"
#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
const Device kGpu0{DeviceKind::kCuda, 0};
}

TEST(GpuMemory, TensorsRoundTripAndTheCacheServesTheSteadyState) {
  LOCKSTEP_REQUIRE_GPU();
  const auto ctx = make_compute_context(kGpu0);
  ComputeScope scope(*ctx);
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 7.0f;
  {
    const Tensor t = Tensor::from_vector(v, {10, 100});
    EXPECT_EQ(t.device(), kGpu0);
    EXPECT_EQ(t.to_vector<float>(), v);
    const Tensor z = Tensor::zeros({10, 100});
    EXPECT_EQ(z.to_vector<float>(), std::vector<float>(1000, 0.0f));
    EXPECT_FALSE(z.bitwise_equal(t));
    EXPECT_TRUE(t.clone().bitwise_equal(t));
    EXPECT_EQ(t.slice(3, 4).to_vector<float>(), std::vector<float>(v.begin() + 300, v.begin() + 400));
  }
  const auto& alloc = ctx->allocator();
  const auto before = alloc.stats();
  for (int i = 0; i < 10; ++i) (void)Tensor::zeros({10, 100});  // every one from the cache
  const auto after = alloc.stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_GE(after.cache_hits, before.cache_hits + 10);
  EXPECT_GE(after.peak_bytes_in_use, 2 * 1000 * sizeof(float));
  EXPECT_EQ(context_bytes_in_use(*ctx), 0u);
}

TEST(GpuMemory, HostToDeviceAndBackThroughTo) {
  LOCKSTEP_REQUIRE_GPU();
  const Tensor h = Tensor::from_vector<std::int64_t>({1, -2, 3, 1LL << 40}, {4});
  const Tensor g = h.to(kGpu0);
  EXPECT_EQ(g.device(), kGpu0);
  const Tensor back = g.to(Device{});
  EXPECT_EQ(back.device().kind, DeviceKind::kCpu);
  EXPECT_EQ(back.to_vector<std::int64_t>(), h.to_vector<std::int64_t>());
  EXPECT_TRUE(g.bitwise_equal(h.to(kGpu0)));  // compared on the host thread
}

TEST(GpuMemory, OutOfMemoryNamesDeviceBytesAskedAndFree) {
  LOCKSTEP_REQUIRE_GPU();
  const auto ctx = make_compute_context(kGpu0);
  ComputeScope scope(*ctx);
  // 2^48 floats = 1 PiB: no GPU has it.
  const std::string err = message_of([] { (void)Tensor::empty({std::int64_t{1} << 24, std::int64_t{1} << 24}); });
  EXPECT_TRUE(has(err, "gpu:0") && has(err, "out of device memory") && has(err, "asked for") && has(err, "free"))
      << err;
  // The device is still usable afterwards.
  EXPECT_EQ(Tensor::full({3}, 2.0).to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

TEST(GpuMemory, AMemoryLimitIsEnforcedAndNamed) {
  LOCKSTEP_REQUIRE_GPU();
  const auto ctx = make_compute_context(kGpu0, 1, {}, 1 << 20);  // a 1 MiB logical device
  ComputeScope scope(*ctx);
  const Tensor small = Tensor::zeros({1000});
  const std::string err = message_of([] { (void)Tensor::zeros({1 << 20}); });  // 4 MiB
  EXPECT_TRUE(has(err, "gpu:0") && has(err, "memory limit") && has(err, "asked for") && has(err, "4194304"))
      << err;
  EXPECT_EQ(small.to_vector<float>()[999], 0.0f);
}

TEST(GpuMemory, AGpuTensorComputedOnTheHostThreadIsANamedError) {
  LOCKSTEP_REQUIRE_GPU();
  const Tensor g = Tensor::from_vector<float>({1, 2, 3}, {3}).to(kGpu0);
  const std::string err = message_of([&] { (void)add(g, g); });
  EXPECT_TRUE(has(err, "gpu:0") && has(err, "cpu:0")) << err;
}

TEST(GpuMemory, EveryGpuIsUsableAndOnePastTheLastIsAnError) {
  LOCKSTEP_REQUIRE_GPU();
  for (int g = 0; g < gpus(); ++g) {
    const auto ctx = make_compute_context(Device{DeviceKind::kCuda, g});
    ComputeScope scope(*ctx);
    EXPECT_EQ(Tensor::full({2}, 3.0).to_vector<float>(), (std::vector<float>{3, 3})) << "gpu:" << g;
  }
  const std::string err = message_of([] { (void)make_compute_context(Device{DeviceKind::kCuda, gpus()}); });
  EXPECT_TRUE(has(err, "gpu:" + std::to_string(gpus())) && has(err, "does not exist")) << err;
}
