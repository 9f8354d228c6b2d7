// jit_compile's decision for a model's step functions, and their replays (step_jit.hpp).
#include "training/step_jit.hpp"

#include <cstdio>

#include "lockstep/core/error.hpp"

namespace lockstep::detail {

const Device& step_device(const distribute::Strategy* strategy) {
  return context_device(strategy ? *strategy->contexts().front() : current_compute_context());
}

// Why the replicas' steps cannot be captured together into one graph (StepGraph's lanes), or
// empty: logical replicas of one GPU, whose collectives go through its memory ordered by device
// fences, can; replicas on several GPUs or workers reduce through peer copies the host waits for,
// NCCL or messages, which are not captured.
std::string replicas_capture_refusal(distribute::Strategy& strategy) {
  const int replicas = strategy.num_replicas_in_sync();
  if (replicas == 1) return {};
  const std::string prefix = "the collectives of its " + std::to_string(replicas) + " replicas are not captured: ";
  if (strategy.num_workers() > 1)
    return prefix + "they reach " + std::to_string(strategy.num_workers()) +
           " workers; the replicas of one worker on one GPU (gpu:0x4) are captured together";
  const std::vector<Device>& devices = strategy.devices();
  for (const Device& d : devices)
    if (d != devices.front())
      return prefix + "they are on " + devices.front().str() + " and " + d.str() +
             ", whose collectives the host waits for (peer copies, NCCL); logical replicas of one GPU "
             "(gpu:0x4) are captured together";
  if (strategy.collectives().implementation() != distribute::CollectiveImplementation::kSharedMemory)
    return prefix + "they meet through messages on the host (cross_device_ops), not through the GPU's memory";
  return {};
}

// The replicas' meeting when several capture one graph together, else null.
std::unique_ptr<LaneMeeting> step_lanes(distribute::Strategy* strategy) {
  if (!strategy || strategy->num_local_replicas() == 1) return nullptr;
  distribute::CollectiveGroup* group = &strategy->collectives();
  return std::make_unique<LaneMeeting>(strategy->num_local_replicas(), group->timeout(),
                                       [group] { return group->failed(); });
}

int lane_of(ReplicaInterface* replica) {
  if (!replica) return 0;
  const ReplicaIds ids = replica->ids();
  return ids.replica_id_in_sync_group % ids.num_local_replicas;
}

std::unique_ptr<StepCaptureCheck> start_capture_check(JitCompile mode, const Device& device, const std::string& step) {
  if (mode == JitCompile::kOn) {
    const std::string refusal = step_capture_refusal(device);
    LOCKSTEP_CHECK(refusal.empty(), "jit_compile=True: ", step, " steps on ", device.str(),
                   " cannot be captured into a graph: ", refusal,
                   "; compile with jit_compile=\"auto\" or False to run them eagerly");
  }
  return std::make_unique<StepCaptureCheck>();
}

std::string decide_capture(const StepCaptureCheck& check, JitCompile mode, const Device& device,
                           distribute::Strategy* strategy, const std::string& model, const std::string& step) {
  std::string why = step_capture_refusal(device);
  const std::string op = check.blocker();
  if (!op.empty()) why += (why.empty() ? "" : "; and ") + op;
  const std::string lanes = strategy ? replicas_capture_refusal(*strategy) : std::string();
  if (!lanes.empty()) why += (why.empty() ? "" : "; and ") + lanes;
  if (!why.empty()) say_eager(mode, device, model, step, true, why);  // once per decision
  return why;
}

void say_eager(JitCompile mode, const Device& device, const std::string& model, const std::string& step, bool all,
               const std::string& why) {
  LOCKSTEP_CHECK(mode != JitCompile::kOn, "jit_compile=True: model '", model, "': the ", step,
                 " step cannot be captured into a graph: ", why,
                 "; compile with jit_compile=\"auto\" or False to run it eagerly");
  // Where capture was to be expected: on a GPU (the CPU never captures).
  if (mode == JitCompile::kAuto && device.kind != DeviceKind::kCpu)
    std::fprintf(stderr, "jit_compile=\"auto\": model '%s' runs %s %s steps eagerly on %s: %s\n", model.c_str(),
                 all ? "its" : "some of its", step.c_str(), device.str().c_str(), why.c_str());
}

std::unique_ptr<StepCaptureCheck> StepJit::check(JitCompile mode, const Device& device) const {
  if (checked_ || mode == JitCompile::kOff) return nullptr;
  return start_capture_check(mode, device, step_);
}

void StepJit::decide(const StepCaptureCheck& check, JitCompile mode, const Device& device,
                     distribute::Strategy* strategy, const std::string& model) {
  checked_ = true;
  reason_ = decide_capture(check, mode, device, strategy, model, step_);
  if (reason_.empty()) replays_ = std::make_unique<StepReplays>(step_, step_lanes(strategy));
}

ReplicaNumbers StepJit::replay(int lane, const data::Element& slice, const StepTerms& terms,
                               const StepReplays::Step& step) {
  optimizers::Optimizer* const opt = terms.optimizer;
  if (opt) opt->set_step_count_before_replay(terms.step, terms.like);
  ReplicaNumbers r = replays_->run(lane, slice, terms.key, step, [opt] {
    if (opt) opt->note_discarded_step();
  });
  if (opt) opt->note_replayed_step(terms.step, terms.whole);
  return r;
}

void StepJit::run_eagerly(std::string_view why, JitCompile mode, const Device& device, const std::string& model) {
  if (!eager_reason_.empty()) return;  // said
  say_eager(mode, device, model, step_, false, std::string(why));
  eager_reason_ = why;
}

}  // namespace lockstep::detail
