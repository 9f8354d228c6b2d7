#include "distribute/work_queue.hpp"

#include <algorithm>

#include "distribute/group_base.hpp"

namespace lockstep::distribute {

Deadline Deadline::in(std::chrono::milliseconds timeout) {
  timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::hours(24 * 365 * 10));
  return {Clock::now() + timeout, timeout};
}

QueuedWork::QueuedWork(GroupBase& group, WorkQueue* queue, int rank, CollectiveCall call, ComputeContext& context,
                       std::chrono::milliseconds timeout)
    : group_(group), queue_(queue), rank_(rank), call_(std::move(call)), context_(&context), timeout_(timeout) {}

bool QueuedWork::is_completed() const {
  if (state_.load(std::memory_order_acquire) == kDone) return true;
  if (queue_) queue_->hurry();
  return false;
}

std::exception_ptr QueuedWork::exception() const { return done() ? error_ : nullptr; }

std::string QueuedWork::describe() const { return call_.name() + " on member " + std::to_string(rank_); }

bool QueuedWork::wait(std::chrono::milliseconds timeout) {
  // A completed work touches neither its queue nor its group: it may outlive both.
  if (!done()) {
    const bool finished = queue_ && queue_->wait(*this, Deadline::in(timeout));
    if (!finished) group_.fail_timeout(rank_, call_, timeout, group_.members_behind(call_.seq));
  }
  if (error_) std::rethrow_exception(error_);
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
  if (!thread_.joinable()) thread_ = std::thread([this] { progress_loop(); });
  const auto now = Clock::now();
  work->pushed_at_ = now;
  last_push_ = now;
  // An older work still queued: its starter went on without waiting for it.
  const bool older_waiting = !queue_.empty();
  queue_.push_back(std::move(work));
  if (older_waiting) hurry_ = true;
  const bool wake = thread_state_ == ThreadState::kDormant || (hurry_ && thread_state_ != ThreadState::kAwake);
  lock.unlock();
  if (wake) work_cv_.notify_one();
}

void WorkQueue::hurry() {
  std::unique_lock<std::mutex> lock(mu_);
  if (hurry_ || queue_.empty() || running_) return;
  hurry_ = true;
  const bool wake = thread_state_ != ThreadState::kAwake;
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
    if (!hurry_) {
      hurry_ = true;
      if (thread_state_ != ThreadState::kAwake) work_cv_.notify_one();
    }
    if (Clock::now() >= deadline) return false;
    ++waiters_sleeping_;
    done_cv_.wait_until(lock, deadline);
    --waiters_sleeping_;
  }
}

void WorkQueue::sleep(std::unique_lock<std::mutex>& lock, ThreadState state, Clock::time_point until) {
  thread_state_ = state;
  if (state == ThreadState::kDormant) work_cv_.wait(lock);
  else work_cv_.wait_until(lock, until);
  thread_state_ = ThreadState::kAwake;
}

void WorkQueue::progress_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const auto now = Clock::now();
    if (!queue_.empty() && !running_) {
      // A young work is probably about to be waited for, and run, by its starter.
      const auto ready = queue_.front()->pushed_at_ + kGrace;
      if (hurry_ || now >= ready) {
        hurry_ = false;
        run_front(lock, nullptr);
      } else {
        sleep(lock, ThreadState::kTicking, ready);
      }
      continue;
    }
    hurry_ = false;
    if (stop_ && queue_.empty()) return;
    if (now - last_push_ < kStayAwake) sleep(lock, ThreadState::kTicking, now + kTick);
    else sleep(lock, ThreadState::kDormant, {});
  }
}

}  // namespace lockstep::distribute
