#include "distribute/collective_watchdog.hpp"

#include <algorithm>

#include "core/thread_signals.hpp"

namespace lockstep::distribute {

CollectiveWatchdog::CollectiveWatchdog(Hooks hooks, std::chrono::microseconds period)
    : hooks_(std::move(hooks)), period_(period) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::watch(int member, std::shared_ptr<WatchedCompletion> completion,
                               Clock::time_point deadline, std::string what, std::string on_timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!thread_.joinable())
    thread_ = std::thread([this] {
      ::lockstep::detail::block_stop_signals_on_this_thread();
      loop();
    });
  const bool was_idle = entries_.empty();
  entries_.push_back(Entry{.member = member,
                           .completion = std::move(completion),
                           .deadline = deadline,
                           .what = std::move(what),
                           .on_timeout = std::move(on_timeout)});
  lock.unlock();
  if (was_idle) work_cv_.notify_one();
}

bool CollectiveWatchdog::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return entries_.empty() && !in_hooks_; });
}

void CollectiveWatchdog::poll(std::vector<int>* abort, std::vector<std::string>* failures) {
  const Clock::time_point now = Clock::now();
  const bool group_failed = hooks_.failed();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    // One failure a member: its later collectives end with its abort.
    const bool report = !e.aborted && std::find(abort->begin(), abort->end(), e.member) == abort->end();
    std::string error;
    const WatchedCompletion::State state = e.completion->query(&error);
    if (state == WatchedCompletion::State::kDone) continue;  // dropped: its buffers may be reused
    if (state == WatchedCompletion::State::kFailed) {
      if (report) {
        failures->push_back(e.what + ": " + error);
        abort->push_back(e.member);
      }
      continue;  // it will not end otherwise
    }
    if (report && now >= e.deadline) {
      failures->push_back(e.on_timeout);
      abort->push_back(e.member);
    } else if (report && group_failed) {
      abort->push_back(e.member);
    }
    if (kept != i) entries_[kept] = std::move(e);
    ++kept;
  }
  entries_.resize(kept);
  // An aborted member's other collectives end with it: none of them is reported again.
  for (Entry& e : entries_)
    if (std::find(abort->begin(), abort->end(), e.member) != abort->end()) e.aborted = true;
}

void CollectiveWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<int> abort;
  std::vector<std::string> failures;
  while (!stop_) {
    if (entries_.empty()) {
      idle_cv_.notify_all();
      work_cv_.wait(lock);  // watch() or stop
      continue;
    }
    abort.clear();
    failures.clear();
    poll(&abort, &failures);
    if (!abort.empty()) {
      // The hooks take the group's locks: not under ours, which watch() takes from inside them.
      in_hooks_ = true;  // not idle until the aborts are done
      lock.unlock();
      for (const std::string& f : failures) hooks_.fail(f);
      std::sort(abort.begin(), abort.end());
      abort.erase(std::unique(abort.begin(), abort.end()), abort.end());
      for (int m : abort) hooks_.abort(m);
      lock.lock();
      in_hooks_ = false;
      continue;
    }
    if (!entries_.empty()) work_cv_.wait_for(lock, period_);
  }
}

}  // namespace lockstep::distribute
