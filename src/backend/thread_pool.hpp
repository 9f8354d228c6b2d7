#pragma once
// A device's compute pool: `size()` threads, the calling thread being one of them.
// parallel_for splits [0, n) into at most size() contiguous chunks; chunk boundaries depend
// only on n, grain and size(), so a given pool size always computes bit-identical results.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep::backend {

/// Pins the calling thread to one CPU; false when the system refuses.
bool pin_current_thread(int cpu);

class ThreadPool {
 public:
  /// `threads` >= 1; the pool spawns threads - 1 workers. With `cpus` (one per thread), worker
  /// i is pinned to cpus[i] (cpus[0] is left for the calling thread).
  explicit ThreadPool(int threads, std::vector<int> cpus = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }
  /// Runs fn(begin, end) over chunks of [0, n), each at least `grain` long, and waits.
  /// Exceptions thrown by fn are rethrown here (the first one).
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

 private:
  void worker_loop(int index);
  void stop_and_join();

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  // The job is written by the caller before generation_ is bumped and read by workers after
  // they see the new generation; pending_ counts workers still running it.
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t job_n_ = 0;
  int job_chunks_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace lockstep::backend
