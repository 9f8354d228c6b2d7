#pragma once
// Stopping fit at a step boundary on request, as Keras' BackupAndRestore does with TF's
// preemption handling: the step (and the gradient-accumulation group it ends) finishes,
// BackupAndRestore writes its normal mid-epoch backup, and fit throws Interrupted.
//
// The library installs no signal handler (it does not take over a process's signals):
// request_stop() is async-signal-safe, so a program's own handler may call it; let the handler run
// on a thread that does not compute (block the signal in the others): oneDNN's JIT GEMM kernels
// point rsp at a heap buffer, where a signal frame corrupts the heap (oneDNN issue 4845).
// `lockstep train` installs one for SIGTERM, SIGINT and SIGHUP (tools/lockstep/stop_signals.hpp).
#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::distribute {
class Strategy;
}

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

/// Whether a handler that calls request_stop is installed (`lockstep train`'s are). Under
/// several workers fit then agrees on the step to stop after (agreed_stop at every 8th step
/// boundary: one 8-byte exchange among the workers); without it no exchange is made, and a
/// request stops only the worker that had it, with no backup.
void expect_stop_requests(bool expected) noexcept;
bool stop_requests_expected() noexcept;

/// A stop that every worker of a job agrees on: the first request's reason on the lowest
/// worker that had one.
struct AgreedStop {
  int reason = 0;
  int worker = 0;
};
/// Whether this process (`strategy` null or of one worker) or any worker of `strategy` had a
/// stop requested. Under several workers with stop requests expected, every worker calls it at
/// the same point (it exchanges their requests, so they all get the same answer); otherwise it
/// reads this process's request alone.
std::optional<AgreedStop> agreed_stop(const distribute::Strategy* strategy);

/// What fit throws when it stopped on request. A fit with a BackupAndRestore callback saved a
/// backup at the step it stopped after (resume by fitting again with the same callback); under
/// several workers that needs stop requests expected (above): else they stop without one (the
/// last scheduled backup stays).
class Interrupted : public Error {
 public:
  /// `worker`: the worker whose request it was, under several workers; -1 otherwise.
  Interrupted(int reason, int epoch, std::int64_t steps_in_epoch, std::string backup_dir, int worker = -1);
  /// The signal number (or 0) given to request_stop.
  int reason() const { return reason_; }
  /// The worker whose request stopped the job (several workers), or -1.
  int worker() const { return worker_; }
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
  int worker_;
};

}  // namespace lockstep::training
