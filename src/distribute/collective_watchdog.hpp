#pragma once
// The deadline of collectives that run on a device after the host enqueued them (NCCL): one
// thread per group polls each outstanding collective's completion (an event, read without
// blocking) against its deadline, as PyTorch c10d's ProcessGroupNCCL watchdog does. A
// collective that fails on the device, or outlives its deadline, fails the group and aborts
// its member's device work; once the group failed elsewhere, every member with work still
// outstanding is aborted too. Nothing here knows CUDA: the completions are the caller's
// (tests/distribute/collective_watchdog_test.cpp drives it with fake ones).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distribute/work_queue.hpp"

namespace lockstep::distribute {

/// Where one collective enqueued on a device stands.
class WatchedCompletion {
 public:
  enum class State { kPending, kDone, kFailed };
  virtual ~WatchedCompletion() = default;
  /// Never blocks; sets *error when it returns kFailed.
  virtual State query(std::string* error) = 0;
};

class CollectiveWatchdog {
 public:
  struct Hooks {
    std::function<bool()> failed;                  // whether the group failed
    std::function<void(const std::string&)> fail;  // fails the group (the first failure is reported)
    std::function<void(int member)> abort;         // ends the member's device work; may be called again
  };
  /// Polls every `period` while something is watched; sleeps otherwise.
  CollectiveWatchdog(Hooks hooks, std::chrono::microseconds period);
  /// Stops the thread and forgets what is still watched.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// Watches `completion` of member `member` until it is done or failed (it is held until then).
  /// Past `deadline` the group fails with `on_timeout`; on a device error, with what + ": " + it.
  void watch(int member, std::shared_ptr<WatchedCompletion> completion, Clock::time_point deadline,
             std::string what, std::string on_timeout);
  /// Blocks until nothing is watched (true) or `deadline` passed (false).
  bool wait_idle(Clock::time_point deadline);

 private:
  struct Entry {
    int member;
    std::shared_ptr<WatchedCompletion> completion;
    Clock::time_point deadline;
    std::string what;
    std::string on_timeout;
    bool aborted = false;  // its member was aborted: only its end is awaited now
  };
  void loop();
  /// With mu_ held: drops what finished and returns what to do about the rest.
  void poll(std::vector<int>* abort, std::vector<std::string>* failures);

  const Hooks hooks_;
  const std::chrono::microseconds period_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // the thread: something to watch, or stop
  std::condition_variable idle_cv_;  // wait_idle: nothing watched any more
  std::vector<Entry> entries_;
  bool stop_ = false;
  bool in_hooks_ = false;  // the thread calls the hooks (with mu_ released)
  std::thread thread_;     // started with the first watch
};

}  // namespace lockstep::distribute
