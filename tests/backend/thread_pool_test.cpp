#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>
#include <numeric>
#include <stdexcept>

#include "backend/allocator.hpp"
#include "backend/context.hpp"
#include "backend/cpu/cpu_kernels.hpp"
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

// IdleWork: the chunks of work that a pool's workers take while they wait between jobs (fit's
// gather of the next batch). Whoever runs them, each chunk runs exactly once.
TEST(ThreadPool, IdleWorkRunsEveryChunkOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> runs(500);
  ThreadPool::IdleWork work(500, [&](std::int64_t i) { ++runs[static_cast<std::size_t>(i)]; });
  ASSERT_TRUE(pool.offer(work));
  ThreadPool::IdleWork other(1, [](std::int64_t) {});
  EXPECT_FALSE(pool.offer(other)) << "one IdleWork at a time";
  // Jobs in between, as ops between two steps: the workers take chunks after each.
  std::atomic<std::int64_t> total{0};
  for (int job = 0; job < 20; ++job)
    pool.parallel_for(1000, 1, [&](std::int64_t b, std::int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 20 * 1000) << "jobs run whole while idle work is out";
  pool.finish(work);
  for (std::size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << "chunk " << i;
  EXPECT_TRUE(pool.offer(other)) << "a finished work is off the pool";
  pool.finish(other);
}

TEST(ThreadPool, IdleWorkersTakeChunksBetweenJobs) {
  ThreadPool pool(2);
  const auto owner = std::this_thread::get_id();
  std::atomic<int> by_workers{0}, runs{0};
  ThreadPool::IdleWork work(64, [&](std::int64_t) {
    if (std::this_thread::get_id() != owner) ++by_workers;
    ++runs;
  });
  ASSERT_TRUE(pool.offer(work));
  // A worker spins for the next job a while after each one and takes chunks meanwhile; a
  // loaded machine may keep it off its core for a time, hence the deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (runs.load() < 64 && std::chrono::steady_clock::now() < deadline)
    pool.parallel_for(2, 1, [](std::int64_t, std::int64_t) {});
  pool.finish(work);
  EXPECT_EQ(runs.load(), 64);
  EXPECT_GT(by_workers.load(), 0) << "no chunk ran on a worker: the owner did all the work";
}

TEST(ThreadPool, FinishRethrowsAChunksExceptionAndThePoolGoesOn) {
  ThreadPool pool(2);
  ThreadPool::IdleWork work(40, [](std::int64_t i) {
    if (i == 17) throw std::runtime_error("chunk 17 failed");
  });
  ASSERT_TRUE(pool.offer(work));
  pool.parallel_for(10, 1, [](std::int64_t, std::int64_t) {});
  EXPECT_THROW(pool.finish(work), std::runtime_error);
  std::atomic<int> runs{0};
  ThreadPool::IdleWork next(5, [&](std::int64_t) { ++runs; });
  ASSERT_TRUE(pool.offer(next));
  pool.finish(next);
  EXPECT_EQ(runs.load(), 5);
}

TEST(ThreadPool, WithdrawnWorkRunsNoChunkAfterwards) {
  ThreadPool pool(3);
  std::atomic<int> runs{0};
  ThreadPool::IdleWork work(100000, [&](std::int64_t) {
    ++runs;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  });
  ASSERT_TRUE(pool.offer(work));
  pool.parallel_for(3, 1, [](std::int64_t, std::int64_t) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  pool.withdraw(work);
  const int at_withdraw = runs.load();
  EXPECT_LT(at_withdraw, 100000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(runs.load(), at_withdraw) << "a chunk ran after withdraw returned";
}

TEST(ThreadPool, AParallelForInsideAnIdleChunkRunsInline) {
  // A worker in a chunk cannot wait for its peers (they may be in chunks too): the kernels an
  // idle chunk calls split nothing there. On the owner (finish) they split as usual.
  ThreadPool pool(3);
  std::vector<std::int64_t> sums(32, -1);
  ThreadPool::IdleWork work(32, [&](std::int64_t i) {
    std::atomic<std::int64_t> sum{0};
    pool.parallel_for(1000, 1, [&](std::int64_t b, std::int64_t e) {
      for (auto k = b; k < e; ++k) sum += k;
    });
    sums[static_cast<std::size_t>(i)] = sum.load();
  });
  ASSERT_TRUE(pool.offer(work));
  for (int job = 0; job < 50; ++job) pool.parallel_for(3, 1, [](std::int64_t, std::int64_t) {});
  pool.finish(work);
  for (std::int64_t s : sums) EXPECT_EQ(s, 999 * 1000 / 2);
}

// The thread that drives a pool runs chunks while it waits for something else (a replica for
// its peers); so a pool without workers takes idle work too, and only the driving thread helps.
TEST(ThreadPool, TheDrivingThreadRunsChunksWhileItWaitsEvenWithoutWorkers) {
  ThreadPool pool(1);
  std::vector<int> runs(3, 0);
  ThreadPool::IdleWork work(3, [&](std::int64_t i) { ++runs[static_cast<std::size_t>(i)]; });
  ASSERT_TRUE(pool.offer(work));
  EXPECT_FALSE(lockstep::backend::help_idle_work()) << "this thread does not drive the pool yet";
  bool other_thread_helped = true;
  {
    const ThreadPool::HelperScope helper(&pool);
    std::thread([&] { other_thread_helped = lockstep::backend::help_idle_work(); }).join();
    EXPECT_TRUE(lockstep::backend::help_idle_work());
    EXPECT_TRUE(lockstep::backend::help_idle_work());
  }
  EXPECT_FALSE(other_thread_helped) << "a thread that does not drive the pool ran a chunk";
  EXPECT_FALSE(lockstep::backend::help_idle_work()) << "the scope is over";
  EXPECT_EQ(runs, (std::vector<int>{1, 1, 0}));
  pool.finish(work);  // the rest
  EXPECT_EQ(runs, (std::vector<int>{1, 1, 1}));
  const ThreadPool::HelperScope helper(&pool);
  EXPECT_FALSE(lockstep::backend::help_idle_work()) << "nothing offered";
}

// A pool serves one job at a time. A second thread calling parallel_for while the first's job is
// in flight (a replica's thread running an idle chunk's gather while another thread computes on
// that replica's context) runs its whole range itself: sharing the job's fields handed one
// caller's chunks to the other's function (wrong rows, and a heap corrupted in training).
TEST(ThreadPool, ASecondCallerDuringAJobRunsItsRangeOnItsOwnThread) {
  ThreadPool pool(3);
  std::promise<void> second_done;
  std::future<void> second_finished = second_done.get_future();
  std::vector<std::pair<std::int64_t, std::int64_t>> second_chunks;
  std::thread::id second_ran_on;
  std::atomic<bool> waited_for_second{false};
  std::thread second;
  pool.parallel_for(3, 1, [&](std::int64_t begin, std::int64_t) {
    if (begin != 0) return;  // the first caller's own chunk: the job is in flight meanwhile
    second = std::thread([&] {
      pool.parallel_for(8, 1, [&](std::int64_t b, std::int64_t e) {
        second_chunks.emplace_back(b, e);
        second_ran_on = std::this_thread::get_id();
      });
      second_done.set_value();
    });
    // Bounded, so that a pool that mixes the jobs fails here rather than hanging.
    waited_for_second = second_finished.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  });
  const std::thread::id second_id = second.get_id();
  second.join();
  ASSERT_TRUE(waited_for_second) << "the second caller did not finish while the first job ran";
  EXPECT_EQ(second_chunks, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 8}}));
  EXPECT_EQ(second_ran_on, second_id);
  // And the pool goes on serving jobs in chunks afterwards.
  std::vector<int> hits(64, 0);
  pool.parallel_for(64, 1, [&](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
  });
  EXPECT_EQ(hits, std::vector<int>(64, 1));
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

// Large blocks start at different offsets in their pages (colours), so that the streams of an
// elementwise kernel over a variable, its optimizer moments and its gradient do not all fall in
// the same cache sets. Blocks stay 64-byte aligned, writable over their whole size, reused by
// size, and freed by empty_cache (ASan checks the frees).
TEST(Allocator, LargeBlocksAreSpreadOverPageOffsets) {
  lockstep::backend::CachingHostAllocator a;
  constexpr std::size_t kBytes = 401408;  // the flagship's 784 x 128 kernel
  std::vector<void*> blocks;
  std::set<std::uintptr_t> offsets;
  for (int i = 0; i < 8; ++i) {
    void* p = a.allocate(kBytes);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
    std::memset(p, i, kBytes);
    offsets.insert(reinterpret_cast<std::uintptr_t>(p) % 4096);
    blocks.push_back(p);
  }
  EXPECT_GE(offsets.size(), 4u) << "8 large blocks share " << offsets.size() << " page offset(s)";
  for (void* p : blocks) a.release(p, kBytes);
  EXPECT_EQ(a.allocate(kBytes), blocks.back());  // the cache hands a block back as it was
  a.release(blocks.back(), kBytes);
  a.empty_cache();
  EXPECT_EQ(a.stats().bytes_cached, 0u);
}

// Elementwise loops split so that the threads' chunks do not start a whole number of pages apart
// (an even split of the flagship's kernel does: 2 x 49 pages), and still cover [0, n) once.
TEST(ThreadPool, ElementwiseChunksStartOffPageMultiplesAndCoverTheRange) {
  lockstep::backend::ComputeContext ctx(lockstep::Device{lockstep::DeviceKind::kCpu, 0}, 2);
  for (std::int64_t n : {std::int64_t{100352}, std::int64_t{65536}, std::int64_t{1} << 20, std::int64_t{100001}}) {
    std::vector<std::pair<std::int64_t, std::int64_t>> seen;
    std::mutex mu;
    lockstep::backend::cpu::parallel(ctx, n, [&](std::int64_t b, std::int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(b, e);
    });
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), 2u) << n;
    EXPECT_EQ(seen[0].first, 0);
    EXPECT_EQ(seen[0].second, seen[1].first);
    EXPECT_EQ(seen[1].second, n);
    EXPECT_NE(seen[1].first * 4 % 4096, 0) << "n = " << n << ": float chunks " << seen[1].first << " elements apart";
  }
}

// A pool's workers never take SIGINT, SIGTERM or SIGHUP, whatever their creator's mask: a
// handler run on a thread inside oneDNN's JIT sgemm corrupts the heap (core/thread_signals.hpp).
TEST(ThreadPool, WorkersBlockTheStopSignals) {
  sigset_t open_mask, previous;
  sigemptyset(&open_mask);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &open_mask, &previous), 0);  // the creator blocks nothing
  std::mutex mu;
  std::vector<std::array<bool, 3>> seen;
  {
    lockstep::backend::ThreadPool pool(3);
    const auto caller = std::this_thread::get_id();
    std::atomic<int> others{0};
    for (int round = 0; round < 200 && others.load() == 0; ++round)
      pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t) {
        if (std::this_thread::get_id() == caller) return;
        sigset_t now;
        pthread_sigmask(SIG_BLOCK, nullptr, &now);
        const std::lock_guard<std::mutex> lock(mu);
        seen.push_back({sigismember(&now, SIGINT) == 1, sigismember(&now, SIGTERM) == 1, sigismember(&now, SIGHUP) == 1});
        others.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      });
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ASSERT_FALSE(seen.empty()) << "no chunk ran on a worker";
  for (const auto& s : seen) {
    EXPECT_TRUE(s[0]) << "SIGINT open on a worker";
    EXPECT_TRUE(s[1]) << "SIGTERM open on a worker";
    EXPECT_TRUE(s[2]) << "SIGHUP open on a worker";
  }
}
