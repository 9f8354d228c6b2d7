#include "backend/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "lockstep/core/error.hpp"

namespace lockstep::backend {

bool pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

ThreadPool::ThreadPool(int threads, std::vector<int> cpus) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) {
    const int cpu = static_cast<std::size_t>(i) < cpus.size() ? cpus[static_cast<std::size_t>(i)] : -1;
    workers_.emplace_back([this, i, cpu] {
      if (cpu >= 0) pin_current_thread(cpu);  // best effort: a container may forbid it
      worker_loop(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
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
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = chunks - 1;
    error_ = nullptr;
    ++generation_;
  }
  cv_work_.notify_all();
  std::exception_ptr mine;
  try {
    std::int64_t b, e;
    chunk_bounds(n, chunks, 0, &b, &e);
    fn(b, e);
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(std::int64_t, std::int64_t)>* job;
    std::int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (index < chunks) {
      std::exception_ptr err;
      try {
        std::int64_t b, e;
        chunk_bounds(n, chunks, index, &b, &e);
        (*job)(b, e);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

}  // namespace lockstep::backend
