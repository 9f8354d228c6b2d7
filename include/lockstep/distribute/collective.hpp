#pragma once
// In-process collectives between the replicas (threads) of one strategy, over shared memory.
//
// all_reduce is a reduce-scatter fused with its all-gather: each replica reduces its own chunk
// of every replica's buffer, in replica order 0..N-1 (so results are bit-identical run to run
// and on every replica), and writes the result into that chunk of every buffer — one read and
// N writes per element over shared memory, two barriers per collective. Every wait has a timeout,
// and a replica that fails aborts the group, so no replica is ever left hanging.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/distribute/reduce_op.hpp"

namespace lockstep::distribute {

class CollectiveGroup;

/// A collective started by one replica; wait() completes it (the waiting replica does its
/// share of the work) or throws DistributedError on timeout or when a peer failed.
class CollectiveHandle {
 public:
  CollectiveHandle() = default;
  void wait();
  void wait(std::chrono::milliseconds timeout);
  bool done() const { return done_; }

 private:
  friend class CollectiveGroup;
  CollectiveGroup* group_ = nullptr;
  int rank_ = 0;
  float* data_ = nullptr;
  std::int64_t count_ = 0;
  ReduceOp op_ = ReduceOp::kSum;
  bool done_ = true;
};

class CollectiveGroup {
 public:
  CollectiveGroup(int size, std::chrono::milliseconds timeout);
  ~CollectiveGroup();
  CollectiveGroup(const CollectiveGroup&) = delete;
  CollectiveGroup& operator=(const CollectiveGroup&) = delete;

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Starts an in-place all-reduce of `count` floats on replica `rank`. Every replica must
  /// call it with the same count and op, in the same order.
  CollectiveHandle all_reduce_async(int rank, float* data, std::int64_t count, ReduceOp op);
  /// all_reduce_async(...).wait()
  void all_reduce(int rank, float* data, std::int64_t count, ReduceOp op);
  /// Waits until every replica has arrived.
  void barrier(int rank, std::chrono::milliseconds timeout);

  /// Marks the group failed: every replica waiting now or later throws DistributedError
  /// naming `failed_rank` and `reason`, until reset().
  void abort(int failed_rank, const std::string& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  /// Clears an abort; only when no replica is inside a collective.
  void reset();

 private:
  friend class CollectiveHandle;
  void run_all_reduce(int rank, float* data, std::int64_t count, ReduceOp op, std::chrono::milliseconds timeout);
  void arrive_and_wait(int rank, std::chrono::milliseconds timeout, const char* what);
  [[noreturn]] void throw_aborted(const char* what);

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::vector<float*> buffers_;
  std::vector<std::int64_t> counts_;
  std::vector<int> ops_;
  // Sense-reversing barrier state.
  std::atomic<int> arrived_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> rank_generation_;
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // guarded by mu_
};

}  // namespace lockstep::distribute
