#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>

#include "backend/allocator.hpp"
#include "backend/context.hpp"
#include "lockstep/core/error.hpp"
#include "backend/thread_pool.hpp"

using lockstep::backend::ThreadPool;

TEST(ThreadPool, JobsPostedRightAfterConstructionRunOnEveryChunk) {
  // A worker that starts after the first job is posted must still run it (this once hung).
  for (int round = 0; round < 300; ++round) {
    ThreadPool pool(3);
    std::vector<int> hits(300, 0);
    pool.parallel_for(300, 1, [&](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
    });
    ASSERT_EQ(std::accumulate(hits.begin(), hits.end(), 0), 300) << "round " << round;
  }
}

TEST(ThreadPool, ChunksCoverTheRangeOnceAndDependOnlyOnSizes) {
  ThreadPool pool(2);
  for (std::int64_t n : {1, 2, 7, 64, 1000}) {
    std::vector<std::pair<std::int64_t, std::int64_t>> seen;
    std::mutex mu;
    pool.parallel_for(n, 4, [&](std::int64_t b, std::int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(b, e);
    });
    std::sort(seen.begin(), seen.end());
    std::int64_t next = 0;
    for (auto [b, e] : seen) {
      EXPECT_EQ(b, next);
      next = e;
    }
    EXPECT_EQ(next, n);
  }
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](std::int64_t b, std::int64_t) {
                                   if (b > 0) throw std::runtime_error("worker chunk failed");
                                 }),
               std::runtime_error);
  // Still usable afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) { count += static_cast<int>(e - b); });
  EXPECT_EQ(count.load(), 100);
}

// Under a sanitizer a refused allocation aborts unless it may return null, as malloc does.
#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "allocator_may_return_null=1"; }
#endif

// A bare std::bad_alloc (from --hidden 10^12) said neither what nor how much.
TEST(Allocator, FailureNamesTheBytesAsked) {
  lockstep::backend::CachingHostAllocator a;
  for (const std::size_t n : {std::size_t{1} << 59, std::size_t{1} << 62}) {
    try {
      (void)a.allocate(n);
      ADD_FAILURE() << "allocated " << n << " bytes";
    } catch (const lockstep::ResourceError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot allocate " + std::to_string(n) + " bytes"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
}
