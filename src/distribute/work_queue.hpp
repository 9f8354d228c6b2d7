#pragma once
// A member's queue of started collectives (QueuedWork), run oldest first by the member's
// progress thread or by a thread that waits for one of them. Shared by every implementation.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "distribute/collective_call.hpp"
#include "lockstep/distribute/work.hpp"
#include "lockstep/tensor/compute_context.hpp"

namespace lockstep::distribute {

using Clock = std::chrono::steady_clock;

/// When a member blocked on a peer gives up, and the timeout that stands for (for messages).
struct Deadline {
  Clock::time_point at;
  std::chrono::milliseconds after;
  /// From now; timeouts beyond ten years are ten years (time points must not overflow).
  static Deadline in(std::chrono::milliseconds timeout);
};

class GroupBase;
class WorkQueue;

class QueuedWork final : public Work {
 public:
  /// queue: where it will wait to run; null when it is executed at once by its starter.
  QueuedWork(GroupBase& group, WorkQueue* queue, int rank, CollectiveCall call, ComputeContext& context,
             std::chrono::milliseconds timeout);

  /// Polling instead of waiting: wakes the progress thread to run it.
  bool is_completed() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  std::exception_ptr exception() const override;
  std::string describe() const override;

  /// Runs the collective on the calling thread, in the compute context of the thread that
  /// started it, and marks it completed (failed when it threw).
  void execute(const Deadline& deadline);

 protected:
  std::chrono::milliseconds default_timeout() const override { return timeout_; }

 private:
  friend class WorkQueue;
  enum State : int { kQueued, kRunning, kDone };
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  /// Once done: the starter's context waits for the device part (call_.device), once.
  void join_device() const;

  GroupBase& group_;
  WorkQueue* queue_;
  const int rank_;
  CollectiveCall call_;  // its tensors are dropped once it completed (call_.device keeps what the device uses)
  ComputeContext* context_;
  const std::chrono::milliseconds timeout_;
  std::atomic<int> state_{kQueued};  // kQueued -> kRunning under the queue's lock
  std::exception_ptr error_;         // written before state_ becomes kDone
  mutable std::once_flag joined_;   // join_device: a second caller returns once the first joined
};

// When the progress thread runs a work. Waking a sleeping thread for every collective costs a
// futex wake and, on a machine whose cores all compute, a context switch on a busy core and
// often the work itself, stolen from a starter that was about to wait for it (measured: 15-20 us
// per all-reduce, more than 1% of a flagship step); a thread that looks at the queue on a timer
// instead preempts a computing replica every tick (see docs/PERFORMANCE.md for what a 2 ms
// tick cost the flagship's 2 replicas on 2 cores). So the progress thread sleeps until someone needs a queued work to
// progress: its starter polls it (is_completed) or starts another without waiting, a peer has
// waited for this member inside a collective for a while (GroupBase::hurry_peers), or the group
// failed. As in MPI, a collective progresses while somebody waits for it or polls it. Except
// where the group asks for it at start (GroupBase::prepare: NCCL, whose run only enqueues device
// work once the peers agree, so that it runs beside the backward pass).
class WorkQueue {
 public:
  explicit WorkQueue(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  /// Runs what is still queued, then stops the progress thread.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void push(std::shared_ptr<QueuedWork> work);
  /// Blocks until `work` (pushed here) completed or `deadline` passed (false). While no other
  /// thread runs this queue's works, runs them on the calling thread, oldest first, up to
  /// `work`: a caller that starts a collective and waits at once runs it with no hand-off.
  /// The works it runs give up on peers at `deadline` too, or earlier (the queue's timeout).
  bool wait(QueuedWork& work, const Deadline& deadline);
  /// Blocks until nothing is queued or running, or `deadline` passed (false).
  bool wait_idle(Clock::time_point deadline);
  /// Someone needs the queued works to progress now (a starter polls, or the group failed).
  void hurry();

 private:
  void progress_loop();
  /// With mu_ held: the queued works must progress now (hurry_); true when the sleeping progress
  /// thread is to be woken for it (the caller notifies work_cv_).
  bool request_progress();
  /// Runs the oldest queued work with `lock` released, giving up on peers after the queue's
  /// timeout or at `limit`, whichever comes first.
  void run_front(std::unique_lock<std::mutex>& lock, const Deadline* limit);

  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // the progress thread: something to run, or stop
  std::condition_variable done_cv_;  // waiters: a work completed
  std::deque<std::shared_ptr<QueuedWork>> queue_;
  bool running_ = false;  // a thread runs a work of this queue
  bool stop_ = false;
  bool hurry_ = false;    // run the oldest work now, however young
  bool thread_sleeping_ = false;  // the progress thread waits on work_cv_
  int waiters_sleeping_ = 0;
  std::thread thread_;  // started with the first push: groups never used cost no thread
};

}  // namespace lockstep::distribute
