#pragma once
// Stopping fit at a step boundary on request, as Keras' BackupAndRestore does with TF's
// preemption handling: the step (and the gradient-accumulation group it ends) finishes,
// BackupAndRestore writes its normal mid-epoch backup, and fit throws Interrupted.
//
// The library installs no signal handler (it does not take over a process's signals):
// request_stop() is async-signal-safe, so a program's own handler may call it. `lockstep train`
// installs one for SIGTERM, SIGINT and SIGHUP.
#include <cstdint>
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::training {

/// Asks every running fit (and any later one, until clear_stop_request) to stop at its next
/// step boundary. `reason`: the signal number that asked, or 0. Async-signal-safe (one atomic
/// store); the first request's reason is kept.
void request_stop(int reason = 0) noexcept;
/// Whether a stop was requested.
bool stop_requested() noexcept;
/// The first request's reason (a signal number, or 0).
int stop_reason() noexcept;
/// Forgets a request (e.g. before another fit in the same process).
void clear_stop_request() noexcept;

/// "SIGTERM", "SIGINT", "SIGHUP", ..., or "signal N"; "a stop request" for 0.
std::string stop_reason_name(int reason);

/// What fit throws when it stopped on request. A one-worker fit with a BackupAndRestore
/// callback saved a backup at the step it stopped after (resume by fitting again with the same
/// callback); several workers cannot agree in time on one step, so they stop without one (the
/// last scheduled backup stays).
class Interrupted : public Error {
 public:
  Interrupted(int reason, int epoch, std::int64_t steps_in_epoch, std::string backup_dir);
  /// The signal number (or 0) given to request_stop.
  int reason() const { return reason_; }
  /// 0-based epoch, and the steps of it trained (the backup's place).
  int epoch() const { return epoch_; }
  std::int64_t steps_in_epoch() const { return steps_; }
  /// Where the backup was written; empty when none was.
  const std::string& backup_dir() const { return backup_dir_; }

 private:
  int reason_;
  int epoch_;
  std::int64_t steps_;
  std::string backup_dir_;
};

}  // namespace lockstep::training
