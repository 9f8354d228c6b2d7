// The caching allocator template (backend/allocator.hpp) over a small counted memory: what it
// does for every kind of memory -- reuse, statistics, the limit, the retry after emptying the
// cache, the error -- checked without a GPU (CUDA's memory runs the same code).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "backend/allocator.hpp"
#include "backend/devices.hpp"

namespace lockstep::backend {
namespace {

// `capacity` bytes in 64-byte classes; `used` is shared so the test sees what the allocator holds.
struct CountedMemory {
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 20;
  static constexpr bool kAllocatesInCapture = false;  // as a GPU's
  static std::size_t size_class(std::size_t nbytes) { return (nbytes + 63) / 64 * 64; }
  void* allocate(std::size_t cls, const char** why) {
    if (*used + cls > capacity) {
      *why = " (counted memory full)";
      return nullptr;
    }
    *used += cls;
    return ::operator new(cls);
  }
  void free(void* block, std::size_t cls) {
    *used -= cls;
    ::operator delete(block);
  }
  std::string out_of_memory(const OutOfMemory& e) const {
    return "counted: asked for " + bytes_and_units(e.asked) + e.why + ", " + std::to_string(e.in_use) + " in use";
  }
  std::shared_ptr<std::size_t> used = std::make_shared<std::size_t>(0);
  std::size_t capacity = 1024;
};
using Counted = CachingAllocator<CountedMemory>;

std::string message_of_allocate(Counted& a, std::size_t nbytes) {
  try {
    (void)a.allocate(nbytes);
  } catch (const ResourceError& e) {
    return e.what();
  }
  ADD_FAILURE() << "allocated " << nbytes << " bytes";
  return "";
}

TEST(CachingAllocator, ReusesAFreedBlockOfItsClassAndCountsIt) {
  Counted a;
  void* p = a.allocate(100);
  a.release(p, 100);
  EXPECT_EQ(a.allocate(120), p);  // the same 128-byte class
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.system_allocations, 1u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.bytes_in_use, 128u);
  EXPECT_EQ(s.bytes_cached, 0u);
  a.release(p, 120);
  a.empty_cache();
  EXPECT_EQ(a.stats().bytes_cached, 0u);
}

TEST(CachingAllocator, PeakIsAHighWaterMarkUntilReset) {
  Counted a;
  void* p = a.allocate(256);
  void* q = a.allocate(64);
  a.release(p, 256);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 320u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes_in_use, 64u);
  a.release(q, 64);
}

TEST(CachingAllocator, TheLimitRefusesWithTheMemorysWordingAndKeepsTheCount) {
  CountedMemory memory;
  Counted a(memory, 256);
  void* p = a.allocate(200);
  const std::string msg = message_of_allocate(a, 64);
  EXPECT_NE(msg.find("counted: asked for 64 bytes (memory limit), 256 in use"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().bytes_in_use, 256u);
  a.release(p, 200);
}

TEST(CachingAllocator, AFullMemoryIsRetriedAfterTheCacheIsReturned) {
  CountedMemory memory;
  memory.capacity = 256;
  Counted a(memory);
  a.release(a.allocate(256), 256);  // cached: the memory is full
  void* p = a.allocate(128);        // another class: only after the cache is emptied
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(*memory.used, 128u);
  EXPECT_EQ(a.stats().bytes_cached, 0u);
  const std::string msg = message_of_allocate(a, 192);
  EXPECT_NE(msg.find("(counted memory full)"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().bytes_in_use, 128u);
  EXPECT_EQ(a.stats().system_allocations, 2u);
  a.release(p, 128);
}

TEST(CachingAllocator, ARequestPastTheMemorysMaximumFailsAtOnce) {
  Counted a;
  const std::string msg = message_of_allocate(a, CountedMemory::kMaxBytes + 1);
  EXPECT_NE(msg.find("asked for 1048577 bytes (1.0 MiB)"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
}

// A captured graph's private pool: what the capture allocates (from the shared cache: a GPU's
// memory cannot be allocated while capturing) stays the pool's when freed, so nothing outside the
// graph is handed memory a replay writes; the pool's blocks go back to the cache with the graph.
TEST(CachingAllocator, AGraphPoolKeepsItsBlocksFromOthersUntilItIsReleased) {
  Counted a;
  void* warm = a.allocate(64);
  a.release(warm, 64);  // the warm-up's block, cached
  const std::uint64_t pool = a.begin_graph_pool();
  void* p = a.allocate(64);
  EXPECT_EQ(p, warm);  // from the shared cache
  a.release(p, 64);
  EXPECT_EQ(a.allocate(64), p);  // the pool's own, within the capture
  void* other = nullptr;
  std::thread([&] { other = a.allocate(64); }).join();  // another thread: not the pool's
  EXPECT_NE(other, p);
  a.end_graph_pool();
  a.release(p, 64);  // the graph's intermediate: still the pool's
  void* outside = a.allocate(64);
  EXPECT_NE(outside, p);
  EXPECT_NE(outside, other);
  a.release_graph_pool(pool);  // the graph is gone: its block is the cache's again
  EXPECT_EQ(a.allocate(64), p);
  for (void* q : {p, outside, other}) a.release(q, 64);
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
}

TEST(CachingAllocator, ACaptureThatNeedsNewDeviceMemoryFailsByNameAndAnOutputOutlivesItsPool) {
  Counted a;
  const std::uint64_t pool = a.begin_graph_pool();
  const std::string msg = message_of_allocate(a, 64);
  EXPECT_NE(msg.find("while a graph is captured, which cannot allocate device memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run the step once eagerly first"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().system_allocations, 0u);
  a.end_graph_pool();
  void* block = a.allocate(128);
  a.release(block, 128);
  const std::uint64_t second = a.begin_graph_pool();
  EXPECT_NE(second, pool);
  void* output = a.allocate(128);  // kept past its graph, as a step's loss sum may be
  a.end_graph_pool();
  a.release_graph_pool(second);
  a.release(output, 128);  // its pool is gone: the shared cache takes it
  EXPECT_EQ(a.allocate(128), output);
  a.release(output, 128);
  a.release_graph_pool(pool);
}

// The registry: a row per device kind, the CPU last and always there.
TEST(DeviceKinds, EveryKindHasARowAndTheCpuComesLast) {
  ASSERT_FALSE(device_kinds().empty());
  EXPECT_EQ(device_kinds().back(), DeviceKind::kCpu);
  for (DeviceKind kind : device_kinds()) {
    const DeviceKindBackend& k = device_kind(kind);
    EXPECT_GE(k.count(), 0);
    EXPECT_TRUE(k.count() == 0 || k.available());
  }
  const DeviceKindBackend& cpu = device_kind(DeviceKind::kCpu);
  EXPECT_TRUE(cpu.available());
  EXPECT_FALSE(cpu.emulated());
  EXPECT_EQ(list_local_devices().back().device, (Device{DeviceKind::kCpu, 0}));
  EXPECT_EQ(list_local_devices().back().description, cpu.name(0));
}

}  // namespace
}  // namespace lockstep::backend
