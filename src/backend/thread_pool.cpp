#include "backend/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <system_error>
#include <utility>

#include "lockstep/core/error.hpp"
#include "core/thread_signals.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_POOL_PAUSE() _mm_pause()
#else
#define LOCKSTEP_POOL_PAUSE() ((void)0)
#endif

namespace lockstep::backend {

namespace {
// A step is many small ops in a row: workers spin this many rounds for the next one before
// sleeping, so that an op's hand-off costs well under a microsecond instead of a futex wake.
constexpr int kSpinRounds = 5000;
// The pool whose worker this thread is (null elsewhere): a parallel_for it calls on that pool
// runs inline (see parallel_for).
thread_local const ThreadPool* t_worker_of = nullptr;
// The pool this thread drives and helps while it waits (HelperScope).
thread_local ThreadPool* t_helps = nullptr;
}  // namespace

bool pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

ThreadPool::ThreadPool(int threads, std::vector<int> cpus) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) {
    const int cpu = static_cast<std::size_t>(i) < cpus.size() ? cpus[static_cast<std::size_t>(i)] : -1;
    try {
      workers_.emplace_back([this, i, cpu] {
        ::lockstep::detail::block_stop_signals_on_this_thread();
        if (cpu >= 0) pin_current_thread(cpu);  // best effort: a container may forbid it
        t_worker_of = this;
        worker_loop(i);
      });
    } catch (const std::system_error& e) {
      // No destructor runs for a half-made pool, and destroying a joinable thread terminates.
      stop_and_join();
      throw ResourceError("cannot start compute thread " + std::to_string(i) + " of " + std::to_string(threads_) + ": " +
                  e.what() + " (" + std::to_string(i) + " running); lower LOCKSTEP_CPU_THREADS or raise the "
                  "process's limits (ulimit -u, ulimit -v)");
    }
  }
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

static void chunk_bounds(std::int64_t n, int chunks, int i, std::int64_t* b, std::int64_t* e) {
  const std::int64_t base = n / chunks, rem = n % chunks;
  *b = i * base + std::min<std::int64_t>(i, rem);
  *e = *b + base + (i < rem ? 1 : 0);
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  const int chunks = static_cast<int>(std::min<std::int64_t>(threads_, (n + grain - 1) / grain));
  // A worker in an IdleWork chunk: its peers may be in chunks too, and it is one of the threads
  // a job would wait for.
  // A second thread calling while one drives a job (an idle chunk's gather on a replica's thread
  // while another thread computes on that replica's context) runs its range alone: the job's
  // fields serve one caller, and sharing them handed one caller's chunks to the other's fn.
  // The caller claims the job by setting job_ from null (atomically: two callers may race for
  // it); workers read it only between a job's publication and their acknowledgement.
  const std::function<void(std::int64_t, std::int64_t)>* none = nullptr;
  if (chunks <= 1 || t_worker_of == this || !std::atomic_ref(job_).compare_exchange_strong(none, &fn)) {
    fn(0, n);
    return;
  }
  job_n_ = n;
  job_chunks_ = chunks;
  error_ = nullptr;
  // Every worker acknowledges every job (idle ones at once), so no worker can still be reading
  // this job's fields when the next one is written.
  pending_.store(threads_ - 1);
  generation_.fetch_add(1);  // publishes the job (seq_cst)
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_work_.notify_all();
  }
  std::exception_ptr mine;
  try {
    std::int64_t b, e;
    chunk_bounds(n, chunks, 0, &b, &e);
    fn(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  for (int i = 0; pending_.load() != 0; ++i) {
    if (i < 2000) LOCKSTEP_POOL_PAUSE();
    else std::this_thread::yield();
  }
  const std::exception_ptr theirs = std::exchange(error_, nullptr);
  std::atomic_ref(job_).store(nullptr);  // after every worker's acknowledgement: the next may claim it
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;  // not generation_.load(): a job may be posted before this thread runs
  for (;;) {
    for (int i = 0; i < kSpinRounds && generation_.load() == seen && !stop_.load(); ++i) {
      if (run_idle_chunk()) i = 0;  // busy, not waiting: the spin starts over
      else if (i < 1000) LOCKSTEP_POOL_PAUSE();
      else std::this_thread::yield();
    }
    if (generation_.load() == seen && !stop_.load()) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_work_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    if (index < job_chunks_) {
      std::exception_ptr err;
      try {
        std::int64_t b, e;
        chunk_bounds(job_n_, job_chunks_, index, &b, &e);
        (*job_)(b, e);
      } catch (...) {
        err = std::current_exception();
      }
      if (err) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = err;
      }
    }
    pending_.fetch_sub(1);
  }
}

void ThreadPool::IdleWork::run(std::int64_t chunk) {
  try {
    fn_(chunk);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

bool ThreadPool::run_idle_chunk() {
  if (idle_.load(std::memory_order_relaxed) == nullptr) return false;
  idle_users_.fetch_add(1);  // before idle_ is read again: retract() waits for it
  bool ran = false;
  if (IdleWork* w = idle_.load()) {
    const std::int64_t chunk = w->next_.fetch_add(1);
    if (chunk < w->chunks_) {
      w->run(chunk);
      ran = true;
    }
  }
  idle_users_.fetch_sub(1);
  return ran;
}

bool ThreadPool::offer(IdleWork& work) {
  IdleWork* none = nullptr;
  return idle_.compare_exchange_strong(none, &work);
}

void ThreadPool::retract(IdleWork& work) {
  IdleWork* mine = &work;
  idle_.compare_exchange_strong(mine, nullptr);
  // A worker that registered before the exchange may still claim a chunk; one that registers
  // after it reads null.
  for (int i = 0; idle_users_.load() != 0; ++i) {
    if (i < 2000) LOCKSTEP_POOL_PAUSE();
    else std::this_thread::yield();
  }
}

ThreadPool::HelperScope::HelperScope(ThreadPool* pool) : previous_(t_helps) { t_helps = pool; }
ThreadPool::HelperScope::~HelperScope() { t_helps = previous_; }

bool help_idle_work() { return t_helps != nullptr && t_helps->run_idle_chunk(); }

void ThreadPool::finish(IdleWork& work) {
  for (std::int64_t c = work.next_.fetch_add(1); c < work.chunks_; c = work.next_.fetch_add(1)) work.run(c);
  retract(work);
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(work.mu_);
    error = std::exchange(work.error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::withdraw(IdleWork& work) {
  work.next_.fetch_add(work.chunks_);  // no chunk claimed from here on runs
  retract(work);
}

}  // namespace lockstep::backend
