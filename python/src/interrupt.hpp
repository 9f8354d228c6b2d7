#pragma once
// Ctrl-C during fit. While C++ trains with the GIL released, Python's own SIGINT handler cannot
// run; this guard turns SIGINT into training::request_stop(SIGINT), so fit stops at the next step
// boundary (BackupAndRestore writes its backup) and throws training::Interrupted, which the
// binding raises as KeyboardInterrupt. The previous handler is restored when the guard ends.
#include <csignal>

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
};

}  // namespace lockstep::python
