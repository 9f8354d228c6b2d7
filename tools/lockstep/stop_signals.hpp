#pragma once
// lockstep train's SIGTERM, SIGINT and SIGHUP: the first asks fit to stop at its next step
// boundary (training::request_stop), where it writes a backup and throws training::Interrupted;
// the handler also restores those signals' default actions, so a second one ends the process
// at once. A signal that was ignored when the process started (nohup's SIGHUP) stays ignored.
// Under mpirun the workers agree every few step boundaries on whether any of them had a signal
// (training::expect_stop_requests), so that all stop after the same step and back it up.
//
// The handler runs on one thread that only waits (main holds a training::StopSignalsRouted), never
// on a thread that computes: oneDNN 2.x's JIT GEMM kernels point rsp at a heap buffer while they run
// (oneDNN issue 4845, fixed in 3.11), so a handler run on a thread inside one pushes its signal
// frame into the heap ("corrupted size vs. prev_size" after Ctrl-C in about 2% of runs).
namespace lockstep::cli {

class StopSignals {
 public:
  StopSignals();   // installs the handler
  ~StopSignals();  // puts back the actions found
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

}  // namespace lockstep::cli
