#pragma once
// lockstep train's SIGTERM, SIGINT and SIGHUP: the first asks fit to stop at its next step
// boundary (training::request_stop), where it writes a backup and throws training::Interrupted;
// the handler also restores those signals' default actions, so a second one ends the process
// at once. A signal that was ignored when the process started (nohup's SIGHUP) stays ignored.
// Under mpirun the workers agree every few step boundaries on whether any of them had a signal
// (training::expect_stop_requests), so that all stop after the same step and back it up.
namespace lockstep::cli {

class StopSignals {
 public:
  StopSignals();   // installs the handler
  ~StopSignals();  // puts back the actions found
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

}  // namespace lockstep::cli
