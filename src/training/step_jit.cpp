// jit_compile's decision for evaluate's and predict's steps, and their replays (step_jit.hpp).
#include "training/step_jit.hpp"

#include <cstdio>

#include "lockstep/core/error.hpp"

namespace lockstep::detail {

const Device& step_device(const distribute::Strategy* strategy) {
  return context_device(strategy ? *strategy->contexts().front() : current_compute_context());
}

std::unique_ptr<StepCaptureCheck> StepJit::check(JitCompile mode, const Device& device) const {
  if (checked_ || mode == JitCompile::kOff) return nullptr;
  if (mode == JitCompile::kOn) {
    const std::string refusal = step_capture_refusal(device);
    LOCKSTEP_CHECK(refusal.empty(), "jit_compile=True: ", step_, " steps on ", device.str(),
                   " cannot be captured into a graph: ", refusal,
                   "; compile with jit_compile=\"auto\" or False to run them eagerly");
  }
  return std::make_unique<StepCaptureCheck>();
}

void StepJit::decide(const StepCaptureCheck& check, JitCompile mode, const Device& device, int replicas,
                     const std::string& model) {
  checked_ = true;
  std::string why = step_capture_refusal(device);
  const std::string op = check.blocker();
  if (!op.empty()) why += (why.empty() ? "" : "; and ") + op;
  // One StepReplays serves one replica thread: several replicas' steps are not captured.
  if (replicas > 1)
    why += (why.empty() ? "" : "; and ") + std::string("the ") + step_ + " steps of its " + std::to_string(replicas) +
           " replicas are not captured: evaluate and predict capture the step of one replica only";
  LOCKSTEP_CHECK(mode != JitCompile::kOn || why.empty(), "jit_compile=True: model '", model, "': the ", step_,
                 " step cannot be captured into a graph: ", why,
                 "; compile with jit_compile=\"auto\" or False to run it eagerly");
  reason_ = why;
  if (why.empty()) {
    replays_ = std::make_unique<StepReplays>(step_);
    return;
  }
  // Once per decision, where capture was to be expected: on a GPU (the CPU never captures).
  if (mode == JitCompile::kAuto && device.kind != DeviceKind::kCpu)
    std::fprintf(stderr, "jit_compile=\"auto\": model '%s' runs its %s steps eagerly on %s: %s\n", model.c_str(),
                 step_.c_str(), device.str().c_str(), why.c_str());
}

ReplicaNumbers StepJit::run(const data::Element& slice, const StepReplays::Step& step) {
  if (!replays_) return step(slice);
  // The step takes no host numbers beside its slice: its signature is the slice's alone.
  ReplicaNumbers r = replays_->run(slice, "", step);
  if (!replays_->failure().empty()) reason_ = replays_->failure();
  return r;
}

}  // namespace lockstep::detail
