// The stop request that fit polls at each step boundary (preemption.hpp).
#include "lockstep/training/preemption.hpp"

#include <atomic>
#include <csignal>

namespace lockstep::training {
namespace {
// 0: no request; otherwise the reason + 1. Lock-free, so a signal handler may store to it.
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free);
}  // namespace

void request_stop(int reason) noexcept {
  int none = 0;
  g_stop.compare_exchange_strong(none, reason + 1);
}

bool stop_requested() noexcept { return g_stop.load(std::memory_order_relaxed) != 0; }

int stop_reason() noexcept {
  const int v = g_stop.load();
  return v == 0 ? 0 : v - 1;
}

void clear_stop_request() noexcept { g_stop.store(0); }

std::string stop_reason_name(int reason) {
  switch (reason) {
    case 0:
      return "a stop request";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal " + std::to_string(reason);
  }
}

Interrupted::Interrupted(int reason, int epoch, std::int64_t steps_in_epoch, std::string backup_dir)
    : Error(detail::concat(
          "fit: interrupted by ", stop_reason_name(reason), " at epoch ", epoch + 1, ", step ",
          steps_in_epoch,
          backup_dir.empty() ? std::string(": no backup saved") : ": backup saved in " + backup_dir)),
      reason_(reason),
      epoch_(epoch),
      steps_(steps_in_epoch),
      backup_dir_(std::move(backup_dir)) {}

}  // namespace lockstep::training
