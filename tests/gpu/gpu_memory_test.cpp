// GPU memory: the caching allocator, its limit and out-of-memory errors, the DeviceOps (staged
// copies from the host, uploads beside queued work), and tensors read from the wrong thread. Skipped without a GPU.
#include <cstring>

#include "backend/context.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/device_upload.hpp"

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
  LOCKSTEP_REQUIRE_REAL_GPU();
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
  LOCKSTEP_REQUIRE_REAL_GPU();
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

// Host-to-device copies go through pinned staging blocks (backend/staging_pool.hpp): the host
// does not wait for them, so the rule to check is that a host buffer changed right after its copy
// was queued never reaches the device changed, also when the copies outrun the 64 MiB of blocks
// (the host then waits for the oldest) and for a copy larger than a block (in pieces).
TEST(GpuMemory, AHostBufferReusedRightAfterItsCopyReachesTheDeviceUnchanged) {
  LOCKSTEP_REQUIRE_GPU();
  const auto ctx = make_compute_context(kGpu0);
  ComputeScope scope(*ctx);
  const std::int64_t n = std::int64_t{1} << 20;  // 4 MiB per copy, 40 copies: 160 MiB queued
  std::vector<float> host(static_cast<std::size_t>(n));
  std::vector<Tensor> on_device;
  for (int i = 0; i < 40; ++i) {
    for (std::int64_t k = 0; k < n; ++k) host[static_cast<std::size_t>(k)] = static_cast<float>(i * 1000 + k % 1000);
    on_device.push_back(Tensor::from_vector(host, {n}));  // the next round overwrites `host` at once
  }
  for (int i = 0; i < 40; ++i) {
    const std::vector<float> got = on_device[static_cast<std::size_t>(i)].to_vector<float>();
    for (std::int64_t k = 0; k < n; k += 4099)
      ASSERT_EQ(got[static_cast<std::size_t>(k)], static_cast<float>(i * 1000 + k % 1000)) << "copy " << i << " at " << k;
  }
  // 40 MiB in one copy: three pieces through blocks of 16 MiB.
  std::vector<float> big(static_cast<std::size_t>(10 * n));
  for (std::size_t k = 0; k < big.size(); ++k) big[k] = static_cast<float>(k % 65521);
  const Tensor g = Tensor::from_vector(big, {10 * n});
  std::fill(big.begin(), big.end(), -1.0f);
  const std::vector<float> got = g.to_vector<float>();
  for (std::size_t k = 0; k < got.size(); k += 1021) ASSERT_EQ(got[k], static_cast<float>(k % 65521)) << k;
  EXPECT_EQ(got.back(), static_cast<float>((got.size() - 1) % 65521));
}

// DeviceUpload (fit's prefetch_to_device): memory reserved while earlier work is queued, the
// copy started beside later work on the copy stream, and taken by the compute stream.
TEST(GpuMemory, AnUploadBesideQueuedWorkDeliversTheHostValues) {
  LOCKSTEP_REQUIRE_GPU();
  const auto ctx = make_compute_context(kGpu0);
  const auto host = make_compute_context(Device{});
  ComputeScope scope(*ctx);
  const Tensor a = Tensor::full({1024, 1024}, 0.5);
  for (int round = 0; round < 20; ++round) {
    // Work queued before the reservation, which may have used the memory the upload gets.
    Tensor busy = matmul(a, a);
    std::vector<float> xv(4096);
    for (std::size_t k = 0; k < xv.size(); ++k) xv[k] = static_cast<float>(round * 7 + static_cast<int>(k));
    std::vector<std::int64_t> yv{round, -round, 3};
    Tensor x, y;
    {
      ComputeScope on_host(*host);
      x = Tensor::from_vector(xv, {64, 64});
      y = Tensor::from_vector(yv, {3});
    }
    DeviceUpload up({x.shape(), y.shape()}, {DType::kF32, DType::kI64});
    busy = matmul(busy, a);  // the step the copy runs beside
    up.start({x, y});
    const std::vector<Tensor> got = up.take();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].device(), kGpu0);
    EXPECT_EQ(got[0].to_vector<float>(), xv) << "round " << round;
    EXPECT_EQ(got[1].to_vector<std::int64_t>(), yv) << "round " << round;
    EXPECT_EQ(busy.to_vector<float>()[0], 1024.0f * 0.25f * 1024.0f * 0.5f);
  }
  // Dropped before its start, and dropped after it without a take: the memory goes back safely.
  for (int round = 0; round < 5; ++round) {
    { DeviceUpload unused({Shape({1000})}, {DType::kF32}); }
    DeviceUpload untaken({Shape({1000})}, {DType::kF32});
    ComputeScope on_host(*host);
    untaken.start({Tensor::full({1000}, 1.0, DType::kF32)});
  }
  EXPECT_EQ(Tensor::full({3}, 2.0).to_vector<float>(), (std::vector<float>{2, 2, 2}));
}
