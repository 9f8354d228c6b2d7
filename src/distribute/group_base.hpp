#pragma once
// What every in-process CollectiveGroup implementation shares: the members' communicators
// (local argument checks, sequence numbers), their work queues, the group's failure state
// (abort, timeouts) and reset(). An implementation only says how one member runs one
// collective (run) and how to wake and clear its transport.
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distribute/work_queue.hpp"
#include "lockstep/distribute/collective_group.hpp"

namespace lockstep::distribute {

class GroupBase : public CollectiveGroup {
 public:
  /// `size` members in this process, which are ranks [first_rank, first_rank + size) of a group
  /// of `world_size` (a multi-process group; in-process groups: first_rank 0, world_size = size).
  GroupBase(CollectiveImplementation implementation, int size, const CollectiveOptions& options, int world_size = 0,
            int first_rank = 0);
  ~GroupBase() override;

  int size() const override { return size_; }
  /// The members of the whole group, in every process; what Communicator::size() says.
  int world_size() const { return world_size_; }
  /// Communicator::rank() of local member 0.
  int first_rank() const { return first_rank_; }
  Communicator& member(int rank) override;
  std::chrono::milliseconds timeout() const override { return timeout_; }
  CollectiveImplementation implementation() const override { return implementation_; }
  bool failed() const override { return failed_.load(std::memory_order_acquire); }
  std::string failure() const override;
  void reset() override;

  // ---- for the members and their works ----
  WorkPtr start(int rank, CollectiveCall call);
  /// Runs member `rank`'s part of `call`; throws when it fails. Anything but a DistributedError
  /// (which every member raises alike, or which already failed the group) fails the group,
  /// since this member then left its peers behind.
  void execute(int rank, const CollectiveCall& call, const Deadline& deadline);
  /// Fails the group (the first failure is the one reported) and wakes every blocked member.
  void fail(const std::string& what);
  /// Throws the DistributedError of `call` on member `rank` in a failed group.
  [[noreturn]] void throw_failed(int rank, const CollectiveCall& call) const;
  void check_failed(int rank, const CollectiveCall& call) const {
    if (failed()) throw_failed(rank, call);
  }
  /// Member `rank` gave up on `call` after `timeout` because `missing` never arrived: fails
  /// the group so that the others are released, and throws.
  [[noreturn]] void fail_timeout(int rank, const CollectiveCall& call, std::chrono::milliseconds timeout,
                                 const std::vector<int>& missing);
  /// fail_timeout's message.
  std::string timeout_message(int rank, const CollectiveCall& call, std::chrono::milliseconds timeout,
                              const std::vector<int>& missing) const;
  /// The members that have not started collective number `seq` yet.
  std::vector<int> members_behind(std::uint64_t seq) const;
  /// Member `rank` has waited for its peers inside a collective for a while: a peer may have
  /// started its part and gone on without waiting, so its progress thread must run it now.
  void hurry_peers(int rank);

 protected:
  /// Member `rank`'s part of `call` (size() > 1); blocking waits give up at `deadline` (with
  /// fail_timeout) and end early when the group fails (with throw_failed).
  virtual void run(int rank, const CollectiveCall& call, const Deadline& deadline) = 0;
  /// Called on the starting thread, in its compute context, before `call` is queued: may set
  /// call.device (what its Work joins before it completes). True when the member's progress
  /// thread is to run it at once rather than when somebody needs it (NCCL: after the peers
  /// agree, run() only enqueues it on the device).
  virtual bool prepare(int rank, CollectiveCall& call) {
    (void)rank;
    (void)call;
    return false;
  }
  /// The group failed: wake every thread blocked in the transport.
  virtual void wake_transport() = 0;
  /// reset(): forget every collective's state (none is in flight).
  virtual void reset_transport() = 0;
  /// What a collective that every local member started still waits for, for its timeout error.
  virtual std::string stall_detail() const { return "every member started it, but it did not complete"; }
  /// Derived destructors call it first: fails what is still pending and stops the progress
  /// threads while run() can still be called.
  void shutdown();

 private:
  class Member;
  void run_single(const CollectiveCall& call);

  const CollectiveImplementation implementation_;
  const int size_;
  const int world_size_;
  const int first_rank_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Member>> members_;
  std::vector<std::unique_ptr<WorkQueue>> queues_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> started_;  // collectives started, per member
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  std::string failure_;  // guarded by failure_mu_
};

}  // namespace lockstep::distribute
