#pragma once
// Work: the handle of one collective started by one member of a group (PyTorch c10d's Work).
//
// A collective progresses by itself once started: each member's collectives run in the order
// that member started them, on that member's progress thread, or on a thread that waits for
// one of them while no other thread runs them (the waiter then runs the member's queued
// collectives, oldest first, up to its own: no hand-off when a caller starts and waits at once).
// The tensors a collective was given belong to it until it completes: neither read nor write
// them before is_completed() or wait() says so. A collective that failed leaves their values
// unspecified, and a peer may still be writing them until CollectiveGroup::reset() returns.
#include <chrono>
#include <exception>
#include <memory>
#include <string>

namespace lockstep::distribute {

class Work {
 public:
  virtual ~Work() = default;

  /// True once the collective finished on this member, successfully or not. Never blocks. Over
  /// NCCL, "finished" is on the member's compute stream, as in c10d: the work queued there from
  /// now on runs after the collective, which the GPU may still be running (wait() too).
  virtual bool is_completed() const = 0;
  /// Blocks until the collective finished on this member and returns true (c10d's contract:
  /// it never returns false). Throws DistributedError naming the collective ("all_reduce #12"),
  /// this member and the cause when it failed: members passed disagreeing arguments, a member
  /// aborted the group, or a member timed out waiting for a peer. When `timeout` passes first,
  /// this member is out of step with its peers, so, as c10d's NCCL group does, wait() aborts
  /// the group (every member's pending and later collectives fail, naming this member) and
  /// throws, naming the member(s) that never started this collective.
  virtual bool wait(std::chrono::milliseconds timeout) = 0;
  /// wait() with the group's timeout (CollectiveOptions::timeout).
  bool wait() { return wait(default_timeout()); }
  /// Why the collective failed, once it completed unsuccessfully; null otherwise.
  virtual std::exception_ptr exception() const = 0;
  /// "all_reduce #12 on member 1"
  virtual std::string describe() const = 0;

 protected:
  virtual std::chrono::milliseconds default_timeout() const = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace lockstep::distribute
