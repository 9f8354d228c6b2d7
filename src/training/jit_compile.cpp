// jit_compile: its spellings, and the decision taken after the first train step is checked.
#include "lockstep/training/jit_compile.hpp"

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "lockstep/training/model.hpp"
#include "training/step_jit.hpp"
#include "training/step_replay.hpp"

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

using detail::step_device;

using detail::lane_of;
using detail::step_lanes;

void Model::set_jit_compile(JitCompile mode) {
  jit_compile_ = mode;
  jit_checked_ = false;
  jit_reason_.clear();
  step_replays_.reset();
  test_jit_.reset();
  predict_jit_.reset();
}

const std::string& Model::jit_compile_reason_for(StepFunction step) const {
  static const std::string none;
  if (step == StepFunction::kTrain) return jit_reason_;
  const auto& jit = step == StepFunction::kTest ? test_jit_ : predict_jit_;
  return jit ? jit->reason() : none;
}

std::shared_ptr<detail::StepJit> Model::step_jit(StepFunction step) {
  auto& jit = step == StepFunction::kTest ? test_jit_ : predict_jit_;
  if (!jit) jit = std::make_shared<detail::StepJit>(step == StepFunction::kTest ? "test" : "predict");
  return jit;
}

std::unique_ptr<StepCaptureCheck> Model::step_capture_check(GradientUse use) const {
  // An accumulation group's held-back batches apply nothing: the check waits for a whole step.
  if (jit_checked_ || jit_compile_ == JitCompile::kOff || use != GradientUse::kApply) return nullptr;
  return detail::start_capture_check(jit_compile_, step_device(strategy_), "train");
}

void Model::decide_step_capture(const StepCaptureCheck& check) {
  jit_checked_ = true;
  jit_reason_ = detail::decide_capture(check, jit_compile_, step_device(strategy_), strategy_, name(), "train");
  if (jit_reason_.empty()) step_replays_ = std::make_shared<detail::StepReplays>("train", step_lanes(strategy_));
}

detail::ReplicaNumbers Model::replay_train_step(
    const data::Element& slice, std::int64_t first_example, std::int64_t group_examples, std::int64_t step,
    ReplicaInterface* replica, const std::function<detail::ReplicaNumbers(const data::Element&)>& train) {
  // The host numbers the step takes beside its slice: a graph replays them as captured.
  const std::string key = std::to_string(first_example) + "/" + std::to_string(group_examples);
  const int lane = lane_of(replica);
  // A count the host set between steps is written now: a capture would record it as a constant.
  if (const auto vars = trainable_variables(); !vars.empty())
    optimizer_->set_step_count_before_replay(step, vars.front());
  detail::ReplicaNumbers r =
      step_replays_->run(lane, slice, key, train, [this] { optimizer_->note_discarded_step(); });
  optimizer_->note_replayed_step(step);
  return r;
}

distribute::PerReplica<detail::ReplicaNumbers> Model::run_replayed(
    const std::function<distribute::PerReplica<detail::ReplicaNumbers>()>& run) {
  return step_replays_->run_lanes(run, jit_reason_);
}

}  // namespace lockstep
