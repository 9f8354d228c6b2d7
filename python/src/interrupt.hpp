#pragma once
// Ctrl-C during fit. While C++ trains with the GIL released, Python's own SIGINT handler cannot
// run; this guard turns SIGINT into training::request_stop(SIGINT), so fit stops at the next step
// boundary (BackupAndRestore writes its backup) and throws training::Interrupted, which the
// binding raises as KeyboardInterrupt. The previous handler is restored when the guard ends.
// The handler never runs on the thread that computes (Python's main one, replica 0): a
// training::StopSignalsRouted gives SIGINT a thread of its own while the guard lives (a handler's
// frame pushed onto a thread inside oneDNN's JIT sgemm corrupts the heap: core/thread_signals.hpp).
#include <csignal>
#include <optional>

#include "lockstep/training/preemption.hpp"
#include "lockstep/training/stop_signals_routed.hpp"

namespace lockstep::python {

class StopOnSigint {
 public:
  StopOnSigint();
  ~StopOnSigint();
  StopOnSigint(const StopOnSigint&) = delete;
  StopOnSigint& operator=(const StopOnSigint&) = delete;

 private:
  bool installed_ = false;
  struct sigaction previous_ {};
  std::optional<training::StopSignalsRouted> routed_;
};

}  // namespace lockstep::python
