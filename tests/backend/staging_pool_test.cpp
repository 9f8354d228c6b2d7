// The staging pool's rule (backend/staging_pool.hpp): a block is lent again only once the
// device has finished reading it. A fake device stands in for CUDA: its fences pass when the
// test says so, so each case shows which block the pool hands out and when the host waits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "backend/staging_pool.hpp"

namespace {

using lockstep::backend::StagingPool;

struct FakeDevice {
  std::map<void*, bool> fences;  // fence -> passed
  std::set<void*> blocks;
  int waits = 0, frees = 0, queries = 0;
  bool out_of_pinned_memory = false;
};

class FakeOps final : public StagingPool::Ops {
 public:
  explicit FakeOps(FakeDevice* d) : d_(d) {}
  ~FakeOps() override {
    for (auto& [f, passed] : d_->fences) std::free(f);
  }
  void* allocate(std::size_t bytes) override {
    if (d_->out_of_pinned_memory) return nullptr;
    void* p = std::malloc(bytes);
    d_->blocks.insert(p);
    return p;
  }
  void free(void* block) override {
    d_->blocks.erase(block);
    ++d_->frees;
    std::free(block);
  }
  void* make_fence() override {
    void* f = std::malloc(1);
    d_->fences[f] = true;  // never recorded: passed
    return f;
  }
  bool passed(void* fence) override {
    ++d_->queries;
    return d_->fences.at(fence);
  }
  void wait(void* fence) override {
    if (!d_->fences.at(fence)) ++d_->waits;
    d_->fences.at(fence) = true;
  }

 private:
  FakeDevice* d_;
};

constexpr std::size_t kKiB = 1024;

// What the copy path does with a lease: records the block's fence after queuing a transfer,
// which passes only when the fake device says so.
void* transfer(FakeDevice& d, const StagingPool::Lease& lease) {
  d.fences.at(lease.fence()) = false;
  return lease.host();
}

TEST(StagingPool, ABlockTheDeviceStillReadsIsNotLentAgain) {
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 4096 * kKiB);
  void* first = nullptr;
  {
    auto lease = pool.acquire(100 * kKiB);
    ASSERT_TRUE(lease);
    first = transfer(d, *lease);
  }
  // Its transfer has not finished: the next copy gets another block, and the host did not wait.
  auto second = pool.acquire(100 * kKiB);
  ASSERT_TRUE(second);
  EXPECT_NE(second->host(), first);
  EXPECT_EQ(d.waits, 0);
  EXPECT_EQ(pool.allocations(), 2u);
}

TEST(StagingPool, AFinishedBlockIsLentAgainWithoutAllocating) {
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 4096 * kKiB);
  void* first = nullptr;
  void* fence = nullptr;
  {
    auto lease = pool.acquire(100 * kKiB);
    first = transfer(d, *lease);
    fence = lease->fence();
  }
  d.fences.at(fence) = true;  // the device read it
  auto again = pool.acquire(80 * kKiB);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->host(), first);
  EXPECT_EQ(pool.allocations(), 1u);
}

TEST(StagingPool, AFinishedBlockOfTheSizeAskedEndsTheSearch) {
  // A step's copy asks the device about one fence when a block of its size is free, however many
  // blocks the pool holds (each question is a call into the driver on the step's path).
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 16384 * kKiB);
  {
    std::vector<StagingPool::Lease> held;
    for (int i = 0; i < 8; ++i) held.push_back(std::move(*pool.acquire(64 * kKiB)));
    for (int i = 0; i < 4; ++i) held.push_back(std::move(*pool.acquire(256 * kKiB)));
  }
  d.queries = 0;
  auto small = pool.acquire(60 * kKiB);
  ASSERT_TRUE(small);
  EXPECT_EQ(d.queries, 1);
  d.queries = 0;
  auto large = pool.acquire(200 * kKiB);
  ASSERT_TRUE(large);
  EXPECT_EQ(d.queries, 1);
  EXPECT_EQ(pool.allocations(), 12u);
}

TEST(StagingPool, ABlockOnLoanIsNeverLentTwice) {
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 4096 * kKiB);
  auto a = pool.acquire(64 * kKiB);
  auto b = pool.acquire(64 * kKiB);  // a's fence has passed (never recorded), but a is on loan
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->host(), b->host());
}

TEST(StagingPool, AtTheCapacityTheHostWaitsForABlockOfTheRightSize) {
  FakeDevice d;
  // Room for two blocks of 1 MiB.
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 2048 * kKiB);
  void* hosts[2];
  for (void*& h : hosts) {
    auto lease = pool.acquire(1024 * kKiB);
    ASSERT_TRUE(lease);
    h = transfer(d, *lease);
  }
  auto third = pool.acquire(1000 * kKiB);
  ASSERT_TRUE(third);
  EXPECT_EQ(d.waits, 1);  // for one of the two, still being read
  EXPECT_TRUE(third->host() == hosts[0] || third->host() == hosts[1]);
  EXPECT_EQ(pool.bytes_held(), 2048 * kKiB);
}

TEST(StagingPool, IdleSmallBlocksMakeRoomForALargerOne) {
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 1024 * kKiB);
  std::vector<void*> fences;
  for (int i = 0; i < 4; ++i) {
    auto lease = pool.acquire(200 * kKiB);  // blocks of 256 KiB: the capacity is full
    ASSERT_TRUE(lease);
    transfer(d, *lease);
    fences.push_back(lease->fence());
  }
  EXPECT_EQ(pool.bytes_held(), 1024 * kKiB);
  for (void* f : fences) d.fences.at(f) = true;
  auto big = pool.acquire(1024 * kKiB);
  ASSERT_TRUE(big);
  EXPECT_EQ(d.frees, 4);
  EXPECT_EQ(pool.bytes_held(), 1024 * kKiB);
  EXPECT_EQ(d.waits, 0);
}

TEST(StagingPool, SmallBlocksStillBeingReadAreNotFreed) {
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 1024 * kKiB);
  for (int i = 0; i < 4; ++i) {
    auto lease = pool.acquire(200 * kKiB);
    transfer(d, *lease);
  }
  // Nothing fits and nothing may be freed: the caller copies the slow way.
  EXPECT_FALSE(pool.acquire(1024 * kKiB));
  EXPECT_EQ(d.frees, 0);
}

TEST(StagingPool, CopiesLargerThanABlockAndMissingPinnedMemoryGoTheSlowWay) {
  FakeDevice d;
  StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 4096 * kKiB);
  EXPECT_FALSE(pool.acquire(1024 * kKiB + 1));
  EXPECT_FALSE(pool.acquire(0));
  d.out_of_pinned_memory = true;
  EXPECT_FALSE(pool.acquire(10));
  d.out_of_pinned_memory = false;
  EXPECT_FALSE(pool.acquire(10));  // an allocation failed once: the pool does not retry each copy
  EXPECT_EQ(pool.allocations(), 0u);
}

TEST(StagingPool, BlockSizesArePowersOfTwoFrom64KiB) {
  EXPECT_EQ(StagingPool::block_size(1), 64 * kKiB);
  EXPECT_EQ(StagingPool::block_size(64 * kKiB), 64 * kKiB);
  EXPECT_EQ(StagingPool::block_size(64 * kKiB + 1), 128 * kKiB);
  EXPECT_EQ(StagingPool::block_size(3000 * kKiB), 4096 * kKiB);
}

TEST(StagingPool, TheDestructorWaitsForBlocksStillBeingRead) {
  FakeDevice d;
  {
    StagingPool pool(std::make_unique<FakeOps>(&d), 1024 * kKiB, 4096 * kKiB);
    auto lease = pool.acquire(10);
    transfer(d, *lease);
  }
  EXPECT_EQ(d.waits, 1);
  EXPECT_TRUE(d.blocks.empty());
}

}  // namespace
