#pragma once
// Where a training step's time goes, per replica (LOCKSTEP_PHASE_TIMES=1): each replica's thread
// adds the wall time of its phases, and the process prints, at exit, every replica's mean
// milliseconds per step in each (the first steps, warm-up, left out). Off, a phase costs one
// branch on a flag read once.
//   input          from the end of the replica's previous step to the start of this one (the
//                  batch's gather, the split over replicas, the merge of the last step's numbers)
//   forward        the model and the loss
//   backward       the gradient tape (gradient buckets' exchanges start meanwhile)
//   update         the optimizer (sum of the gradients, the rule, shards gathered back)
//   exchange wait  time blocked on a collective or a barrier anywhere in the step; not counted
//                  again in the phase it happened in
// and one line for the loop that drives the steps (fit's thread), whatever runs them (one device,
// replicas, a replayed graph), as mean milliseconds per step:
//   input wait     getting the next batch (the pipeline, the copy to the device)
//   step           running or queueing the step (a replay, or the phases above on one device)
//   read           reading the execution's losses and metrics (where a GPU's queue drains)
//   callbacks      the batch callbacks (the progress bar, ...)
namespace lockstep::distribute::phase_times {

enum class Phase { kInput, kForward, kBackward, kExchangeWait, kUpdate };

/// LOCKSTEP_PHASE_TIMES, read once.
bool enabled();

/// Adds the time from construction to destruction to `phase` of the calling thread (less the
/// exchange waits inside it). kForward marks the start of a step; `replica` labels the thread.
class Scope {
 public:
  Scope(Phase phase, int replica = -1);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Phase phase_;
  bool on_;
  double start_ = 0, waits_at_start_ = 0;
};

enum class LoopPhase { kInputWait, kStep, kRead, kCallbacks };

/// Adds the time from construction to destruction to the loop's `phase` (the calling thread's
/// line). kStep counts a step.
class LoopScope {
 public:
  explicit LoopScope(LoopPhase phase);
  ~LoopScope();
  LoopScope(const LoopScope&) = delete;
  LoopScope& operator=(const LoopScope&) = delete;

 private:
  LoopPhase phase_;
  bool on_;
  double start_ = 0;
};

/// A wait for a collective or a barrier (QueuedWork::wait): adds to kExchangeWait.
class WaitScope {
 public:
  WaitScope();
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  bool on_;
  double start_ = 0;
};

}  // namespace lockstep::distribute::phase_times
