#pragma once
// jit_compile for evaluate's and predict's steps (Keras' test_function and predict_function):
// the first step after compile (or set_jit_compile, or distribute) runs eagerly, watched by a
// StepCaptureCheck; then either every later step is replayed from a graph per input signature
// (StepReplays, fit's owner of that idea) or all run eagerly, "auto" saying why once on a GPU
// and true refusing by name. One replica only: the steps of several run eagerly, said so.
#include <memory>
#include <string>

#include "lockstep/tensor/step_capture.hpp"
#include "lockstep/training/jit_compile.hpp"
#include "training/step_replay.hpp"

namespace lockstep::detail {

/// The device a model's steps run on: its strategy's first replica's, else this thread's.
const Device& step_device(const distribute::Strategy* strategy);

class StepJit {
 public:
  /// `step`: "test" or "predict", the word the messages use.
  explicit StepJit(std::string step) : step_(std::move(step)) {}

  /// One step of `model` on `batch` through the replicas (run_on_slices): `f(slice, replica)`
  /// gives a replica's numbers. The first step after a reset is checked and decides; later ones
  /// are replayed (f then runs once per signature, inside its capture) or run eagerly. Under
  /// true, ValueError naming the device (before the step) or what blocks capture (after it).
  template <typename F>
  distribute::PerReplica<ReplicaNumbers> step(distribute::Strategy* strategy, const distribute::DistributedBatch& batch,
                                              JitCompile mode, const std::string& model, F&& f) {
    const Device& device = step_device(strategy);
    const std::unique_ptr<StepCaptureCheck> watch = check(mode, device);
    auto parts = run_on_slices(strategy, batch, [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
      const StepCaptureCheck::OnThisThread watched(watch.get());
      return run(s, [&](const data::Element& in) { return f(in, rc); });
    });
    if (watch) decide(*watch, mode, device, strategy ? strategy->num_replicas_in_sync() : 1, model);
    return parts;
  }
  /// Why the steps run eagerly: empty before the check, under off, and while they are replayed.
  const std::string& reason() const { return reason_; }

 private:
  /// The check watching the next step, or null where decided already or under off; under true,
  /// ValueError naming the device where it cannot capture.
  std::unique_ptr<StepCaptureCheck> check(JitCompile mode, const Device& device) const;
  /// After the checked step: replays from now on where the device and every op allow and
  /// `replicas` is 1, else eager with the reason (said once under "auto" on a GPU; ValueError
  /// naming it under true).
  void decide(const StepCaptureCheck& check, JitCompile mode, const Device& device, int replicas,
              const std::string& model);
  /// One replica's step on `slice`: replayed where decided so, else `step` run on it.
  ReplicaNumbers run(const data::Element& slice, const StepReplays::Step& step);

  std::string step_;
  bool checked_ = false;
  std::string reason_;
  std::unique_ptr<StepReplays> replays_;
};

}  // namespace lockstep::detail
