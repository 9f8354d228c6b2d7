#pragma once
// A device's compute pool: `size()` threads, the calling thread being one of them.
// parallel_for splits [0, n) into at most size() contiguous chunks; chunk boundaries depend
// only on n, grain and size(), so a given pool size always computes bit-identical results.
// Between parallel_fors the workers wait; IdleWork gives them something to do meanwhile (the
// next batch's gather, in fit), in chunks short enough not to delay the next parallel_for.
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

class ThreadPool;
/// Runs one chunk of the idle work of the pool this thread drives (ThreadPool::HelperScope);
/// false when it drives none or there is nothing to run. What a barrier's spin calls: only the
/// thread that drives a pool may run its chunks, since a chunk may call parallel_for on it.
bool help_idle_work();

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
  /// Called from one of this pool's workers (inside an IdleWork chunk), it runs fn(0, n) there:
  /// the other threads may be busy with chunks of their own.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

  /// Work for the moments the workers would otherwise spend waiting for the next parallel_for:
  /// fn(i) for every i in [0, chunks), each chunk run once, by a worker between jobs or by the
  /// thread that calls finish(). A chunk should take microseconds: a parallel_for waits for the
  /// workers in one. fn's exceptions are rethrown by finish().
  class IdleWork {
   public:
    IdleWork(std::int64_t chunks, std::function<void(std::int64_t)> fn) : fn_(std::move(fn)), chunks_(chunks) {}

   private:
    friend class ThreadPool;
    void run(std::int64_t chunk);
    std::function<void(std::int64_t)> fn_;
    std::int64_t chunks_;
    std::atomic<std::int64_t> next_{0};  // the next chunk to claim
    std::mutex mu_;
    std::exception_ptr error_;  // guarded by mu_
  };
  /// Offers `work` to the workers, and to the thread that drives the pool while it waits for
  /// something other than the pool (its peers at a barrier, its next step: help_idle_work), so
  /// that a replica of one thread, which has no workers, still gathers its next batch in the
  /// time it would spend waiting; false (and nothing offered) when another IdleWork is
  /// still out. `work` must outlive finish() or withdraw().
  bool offer(IdleWork& work);
  /// Makes `pool` the one help_idle_work() helps on this thread while it lives (a strategy's
  /// replica thread, for its context's pool); nested scopes restore the previous one.
  class HelperScope {
   public:
    explicit HelperScope(ThreadPool* pool);
    ~HelperScope();
    HelperScope(const HelperScope&) = delete;
    HelperScope& operator=(const HelperScope&) = delete;

   private:
    ThreadPool* previous_;
  };
  /// Runs the chunks no worker has claimed, on the calling thread, waits for those in flight
  /// and rethrows the first exception of any chunk. Afterwards no other thread touches `work`
  /// (an IdleWork runs once: it is not offered again).
  void finish(IdleWork& work);
  /// Takes `work` back undone: chunks not claimed yet are dropped, those in flight waited for.
  void withdraw(IdleWork& work);

 private:
  void worker_loop(int index);
  /// Claims and runs one chunk of the offered IdleWork; false when there was none to run.
  bool run_idle_chunk();
  friend bool help_idle_work();
  /// Takes `work` off offer and waits until no worker is inside a chunk of it.
  void retract(IdleWork& work);
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
  // The offered IdleWork; idle_users_ counts workers that may be reading it (they register
  // before they load idle_, so retract() can wait them out).
  std::atomic<IdleWork*> idle_{nullptr};
  std::atomic<int> idle_users_{0};
};

}  // namespace lockstep::backend
