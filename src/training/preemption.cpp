// The stop request that fit polls at each step boundary (preemption.hpp).
#include "lockstep/training/preemption.hpp"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <vector>

#include "lockstep/distribute/strategy.hpp"

namespace lockstep::training {
namespace {
// 0: no request; otherwise the reason + 1. Lock-free, so a signal handler may store to it.
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<bool> g_expected{false};
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

void expect_stop_requests(bool expected) noexcept { g_expected.store(expected); }

bool stop_requests_expected() noexcept { return g_expected.load(); }

std::optional<AgreedStop> agreed_stop(const distribute::Strategy* strategy) {
  if (!strategy || strategy->num_workers() == 1 || !stop_requests_expected()) {
    if (!stop_requested()) return std::nullopt;
    return AgreedStop{.reason = stop_reason(), .worker = strategy ? strategy->worker_index() : 0};
  }
  // 0: no request; else the reason + 1, as g_stop holds it.
  const std::vector<std::int64_t> requests =
      strategy->gather_int_from_workers("the workers' stop-request check", g_stop.load());
  for (std::size_t w = 0; w < requests.size(); ++w)
    if (requests[w] != 0) return AgreedStop{.reason = static_cast<int>(requests[w] - 1), .worker = static_cast<int>(w)};
  return std::nullopt;
}

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

Interrupted::Interrupted(int reason, int epoch, std::int64_t steps_in_epoch, std::string backup_dir, int worker)
    : Error(detail::concat(
          "fit: interrupted by ", stop_reason_name(reason),
          worker >= 0 ? " (sent to worker " + std::to_string(worker) + ")" : std::string(), " at epoch ", epoch + 1, ", step ",
          steps_in_epoch,
          backup_dir.empty() ? std::string(": no backup saved") : ": backup saved in " + backup_dir)),
      reason_(reason),
      epoch_(epoch),
      steps_(steps_in_epoch),
      backup_dir_(std::move(backup_dir)),
      worker_(worker) {}

}  // namespace lockstep::training
