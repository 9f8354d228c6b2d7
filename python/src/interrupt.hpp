#pragma once
// Ctrl-C during fit. While C++ trains with the GIL released, Python's own SIGINT handler cannot
// run; this guard turns SIGINT into training::request_stop(SIGINT), so fit stops at the next step
// boundary (BackupAndRestore writes its backup) and throws training::Interrupted, which the
// binding raises as KeyboardInterrupt. The previous handler is restored when the guard ends.
// The handler never runs on the thread that computes: that thread (Python's main one, replica 0)
// blocks SIGINT while the guard lives and a thread of the guard's takes it instead (a handler's
// frame pushed onto a thread inside oneDNN's JIT sgemm corrupts the heap: core/thread_signals.hpp).
#include <pthread.h>

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>

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
  bool blocked_ = false;
  sigset_t previous_mask_{};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread receiver_;
};

}  // namespace lockstep::python
