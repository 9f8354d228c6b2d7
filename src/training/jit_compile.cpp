// jit_compile: its spellings, and the decision taken after the first train step is checked.
#include "lockstep/training/jit_compile.hpp"

#include <cstdio>

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep {

JitCompile parse_jit_compile(const std::string& value) {
  if (value == "auto") return JitCompile::kAuto;
  if (value == "on" || value == "true") return JitCompile::kOn;
  if (value == "off" || value == "false") return JitCompile::kOff;
  throw ValueError("jit_compile must be \"auto\", true or false (on or off), got '" + value + "'");
}

const char* jit_compile_name(JitCompile mode) {
  switch (mode) {
    case JitCompile::kAuto: return "auto";
    case JitCompile::kOn: return "on";
    case JitCompile::kOff: return "off";
  }
  return "auto";
}

namespace {
const Device& step_device(const distribute::Strategy* strategy) {
  return context_device(strategy ? *strategy->contexts().front() : current_compute_context());
}
}  // namespace

void Model::set_jit_compile(JitCompile mode) {
  jit_compile_ = mode;
  jit_checked_ = false;
  jit_reason_.clear();
}

std::unique_ptr<StepCaptureCheck> Model::step_capture_check(GradientUse use) const {
  // An accumulation group's held-back batches apply nothing: the check waits for a whole step.
  if (jit_checked_ || jit_compile_ == JitCompile::kOff || use != GradientUse::kApply) return nullptr;
  if (jit_compile_ == JitCompile::kOn) {
    const Device& device = step_device(strategy_);
    const std::string refusal = step_capture_refusal(device);
    LOCKSTEP_CHECK(refusal.empty(), "jit_compile=True: train steps on ", device.str(),
                   " cannot be captured into a graph: ", refusal,
                   "; compile with jit_compile=\"auto\" or False to run them eagerly");
  }
  return std::make_unique<StepCaptureCheck>();
}

void Model::decide_step_capture(const StepCaptureCheck& check) {
  jit_checked_ = true;
  const Device& device = step_device(strategy_);
  const std::string op = check.blocker();
  LOCKSTEP_CHECK(jit_compile_ != JitCompile::kOn || op.empty(), "jit_compile=True: model '", name(),
                 "': the train step cannot be captured into a graph: ", op,
                 "; compile with jit_compile=\"auto\" or False to run it eagerly");
  std::string why = step_capture_refusal(device);
  if (!op.empty()) why += (why.empty() ? "" : "; and ") + op;
  // Every op could be captured on a device that captures: fit does not replay captured steps
  // yet (StepGraph is the mechanism), so they still run eagerly, saying so.
  if (why.empty()) why = "every op of the step can be captured, but fit does not replay captured steps yet";
  jit_reason_ = why;
  // Once per compile, where capture was to be expected: on a GPU (the CPU never captures).
  if (jit_compile_ == JitCompile::kAuto && device.kind != DeviceKind::kCpu)
    std::fprintf(stderr, "jit_compile=\"auto\": model '%s' runs its train steps eagerly on %s: %s\n", name().c_str(),
                 device.str().c_str(), why.c_str());
}

}  // namespace lockstep
