#include "distribute/work_queue.hpp"

#include <algorithm>

#include "distribute/group_base.hpp"
#include "distribute/phase_times.hpp"
#include "core/thread_signals.hpp"

namespace lockstep::distribute {

Deadline Deadline::in(std::chrono::milliseconds timeout) {
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365 * 10));
  return {Clock::now() + timeout, timeout};
}

QueuedWork::QueuedWork(GroupBase& group, WorkQueue* queue, int rank, CollectiveCall call, ComputeContext& context,
                       std::chrono::milliseconds timeout)
    : group_(group), queue_(queue), rank_(rank), call_(std::move(call)), context_(&context), timeout_(timeout) {}

bool QueuedWork::is_completed() const {
  if (state_.load(std::memory_order_acquire) == kDone) {
    join_device();
    return true;
  }
  if (queue_) queue_->hurry();
  return false;
}

void QueuedWork::join_device() const {
  // After a failure there is nothing to read; the device part ends with the group's abort.
  if (call_.device && !error_) std::call_once(joined_, [this] { call_.device->join(*context_); });
}

std::exception_ptr QueuedWork::exception() const { return done() ? error_ : nullptr; }

std::string QueuedWork::describe() const { return call_.name() + " on member " + std::to_string(rank_); }

bool QueuedWork::wait(std::chrono::milliseconds timeout) {
  // A completed work touches neither its queue nor its group: it may outlive both.
  if (!done()) {
    const phase_times::WaitScope timed;
    const bool finished = queue_ && queue_->wait(*this, Deadline::in(timeout));
    if (!finished) group_.fail_timeout(rank_, call_, timeout, group_.members_behind(call_.seq));
  }
  if (error_) std::rethrow_exception(error_);
  join_device();
  return true;
}

void QueuedWork::execute(const Deadline& deadline) {
  {
    // Tensors it makes (received chunks) come from the member's device. The collectives use
    // only copies and reduce_across, which leave the context's compute pool alone: the member's
    // own thread may be computing on it meanwhile, and a pool serves one thread at a time.
    ComputeScope scope(*context_);
    try {
      group_.execute(rank_, call_, deadline);
    } catch (...) {
      error_ = std::current_exception();
    }
    call_.in = Tensor();
    call_.out = Tensor();
  }
  state_.store(kDone, std::memory_order_release);
}

// ---------------------------------------------------------------------------------------
WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    hurry_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void WorkQueue::push(std::shared_ptr<QueuedWork> work) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] {
      ::lockstep::detail::block_stop_signals_on_this_thread();
      progress_loop();
    });
  // An older work still queued: its starter went on without waiting for it.
  const bool older_waiting = !queue_.empty();
  queue_.push_back(std::move(work));
  const bool wake = older_waiting && request_progress();
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

bool WorkQueue::request_progress() {
  hurry_ = true;
  // While another thread runs a work, run_front wakes the progress thread when it is done.
  return thread_sleeping_ && !running_;
}

void WorkQueue::hurry() {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.empty()) return;
  const bool wake = request_progress();
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

void WorkQueue::run_front(std::unique_lock<std::mutex>& lock, const Deadline* limit) {
  std::shared_ptr<QueuedWork> work = std::move(queue_.front());
  queue_.pop_front();
  work->state_.store(QueuedWork::kRunning, std::memory_order_relaxed);
  running_ = true;
  lock.unlock();
  const Deadline own = Deadline::in(timeout_);
  work->execute(limit && limit->at < own.at ? *limit : own);
  work.reset();  // the last reference may be ours: destroy it outside the lock
  lock.lock();
  running_ = false;
  if (waiters_sleeping_ > 0) done_cv_.notify_all();
  if (thread_sleeping_ && (stop_ || (hurry_ && !queue_.empty()))) work_cv_.notify_one();
}

bool WorkQueue::wait(QueuedWork& work, const Deadline& deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (work.done()) return true;
    // Still queued means the oldest queued work is this one or an earlier one: run it here.
    if (!running_ && work.state_.load(std::memory_order_relaxed) == QueuedWork::kQueued) {
      run_front(lock, &deadline);
      continue;
    }
    if (Clock::now() >= deadline.at) return false;
    ++waiters_sleeping_;
    done_cv_.wait_until(lock, deadline.at);
    --waiters_sleeping_;
  }
}

bool WorkQueue::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty() && !running_) return true;
    if (request_progress()) work_cv_.notify_one();
    if (Clock::now() >= deadline) return false;
    ++waiters_sleeping_;
    done_cv_.wait_until(lock, deadline);
    --waiters_sleeping_;
  }
}

void WorkQueue::progress_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (hurry_ && !queue_.empty() && !running_) {
      run_front(lock, nullptr);
      continue;
    }
    if (queue_.empty()) {
      hurry_ = false;
      if (stop_) return;
    }
    thread_sleeping_ = true;
    work_cv_.wait(lock);  // hurry(), a push behind an unclaimed work, a finished run, or stop
    thread_sleeping_ = false;
  }
}

}  // namespace lockstep::distribute
