// jit_compile: its spellings, and the state of a model's step functions (one StepJit each).
#include "lockstep/training/jit_compile.hpp"

#include "lockstep/core/error.hpp"
#include "lockstep/training/model.hpp"
#include "training/step_jit.hpp"

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

void Model::set_jit_compile(JitCompile mode) {
  jit_compile_ = mode;
  reset_step_jits();
}

void Model::reset_step_jits() {
  for (auto& jit : step_jits_) jit.reset();
}

const std::string& Model::jit_compile_reason_for(StepFunction step) const {
  static const std::string none;
  const auto& jit = step_jits_[static_cast<std::size_t>(step)];
  return jit ? jit->reason() : none;
}

std::shared_ptr<detail::StepJit> Model::step_jit(StepFunction step) {
  auto& jit = step_jits_[static_cast<std::size_t>(step)];
  if (!jit)
    jit = std::make_shared<detail::StepJit>(step == StepFunction::kTrain ? "train"
                                            : step == StepFunction::kTest ? "test"
                                                                          : "predict");
  return jit;
}

}  // namespace lockstep
