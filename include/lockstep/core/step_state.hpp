#pragma once
// The step's changing numbers where the step runs: each replica holds a StepBlock in its
// device's memory (the optimizer makes it with its slots, placed like a mirrored variable). One
// kernel at the start of a step counts the step before it (unless that one was skipped), then
// derives the step's scalars (the learning rate, Adam's alpha and decay) from the count and the
// optimizer's StepRule, which the block holds too; the update kernels read them through a
// pointer. The end of a step is that next kernel's work, not a kernel of its own (a launch fewer
// per step: the count is read only inside a step, after its start, or by the host through
// count_after_step). A step's launches then take the same arguments every step, so a captured
// step replays right, and the host reads nothing. The rule is the host's to change (a learning
// rate set between steps): it writes it into the block before a step, never inside one, as Keras
// 3 and PyTorch's capturable Adam keep the rate in a device variable, so a replayed step reads
// the rate of now, not the one captured. derive_step_scalars is the one rule, for the host and
// the device.
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "lockstep/core/host_device.hpp"
#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/core/schedule_math.hpp"

namespace lockstep::step_state {

/// What the block holds across steps.
struct StepState {
  std::int64_t iterations = 0;  // updates applied before this step (Keras' optimizer.iterations)
  std::int32_t skipped = 0;     // whether this step's update is skipped (1) or applies (0): the
                                // loss scale's finite check sets it (mark_not_finite)
  std::int32_t begun = 0;       // whether a step has begun since the count was set (1): the next
                                // begin_step counts it unless it was skipped
};

/// The step's numbers, derived at its start (float32, Keras' roundings).
struct StepScalars {
  float lr = 0;     // the learning rate (SGD's)
  float alpha = 0;  // Adam: lr * sqrt(1 - b2^t) / (1 - b1^t), t = iterations + 1
  float decay = 0;  // AdamW: lr * weight_decay; 0 for Adam
  float pad = 0;
};

enum class RuleKind : std::uint8_t { kSgd, kAdam };

/// The optimizer's description of its steps: its schedule (or constant rate) and the numbers its
/// bias corrections use.
struct StepRule {
  schedule_math::ScheduleDesc schedule;
  RuleKind kind = RuleKind::kSgd;
  double beta_1 = 0, beta_2 = 0, weight_decay = 0;
};

struct StepBlock {
  StepState state;
  StepScalars scalars;
  // The dynamic loss scale where one is kept on the device (loss_scale_set writes it; zeros until
  // then): the step's loss factor and unscaling read it, loss_scale_update moves it.
  loss_scale_math::LossScaleState loss_scale;
  // The optimizer's rule, written by the host (step_rule_set) before the block's first step and
  // whenever it changed since, between steps; begin_step derives the scalars from it. Last, so
  // that the fields above keep their offsets.
  StepRule rule;
};
/// A block's size in float32 elements (it is stored as a float32 tensor; all zeros is count 0,
/// step applied, and a rate of 0 until the rule is written).
constexpr std::int64_t kStepBlockFloats = static_cast<std::int64_t>((sizeof(StepBlock) + 3) / 4);
// The block is copied as bytes between the host and the device, and read in place through a
// pointer to the tensor's memory: plain bytes, its doubles and 64-bit counts aligned as the
// memory is (tensors start 64-byte aligned on the host, 256 on a GPU), and the fields read from
// the host by offset where they were (step_skipped reads the StepState at the start; the scalars
// are floats 4 to 6, as the parity rows read them).
static_assert(std::is_trivially_copyable_v<StepBlock> && std::is_standard_layout_v<StepBlock>);
static_assert(alignof(StepBlock) <= 64);
static_assert(offsetof(StepBlock, state) == 0 && offsetof(StepBlock, scalars) == 16);

/// The scalars of step `step` (updates applied before it): the learning rate as the schedule
/// gives it, rounded to float32, and for Adam Keras' float32 form of every constant (the
/// reference agrees to 3e-5 only this way).
LOCKSTEP_HOST_DEVICE inline StepScalars derive_step_scalars(const StepRule& r, std::int64_t step) {
  const double lr = schedule_math::schedule_rate(r.schedule, step);
  StepScalars s;
  s.lr = static_cast<float>(lr);
  if (r.kind == RuleKind::kAdam) {
    const float t = static_cast<float>(step + 1);
    const float b1_power = powf(static_cast<float>(r.beta_1), t);
    const float b2_power = powf(static_cast<float>(r.beta_2), t);
    s.alpha = static_cast<float>(lr) * sqrtf(1.0f - b2_power) / (1.0f - b1_power);
    s.decay = r.weight_decay > 0 ? static_cast<float>(r.weight_decay * lr) : 0.0f;
  }
  return s;
}

/// The kernel at the start of a step: the step before it counted (Keras: a skipped one does
/// not), then the scalars of the count by the block's rule; the step applies unless its check
/// finds otherwise.
LOCKSTEP_HOST_DEVICE inline void begin_step(StepBlock& b) {
  if (b.state.begun && !b.state.skipped) ++b.state.iterations;
  b.scalars = derive_step_scalars(b.rule, b.state.iterations);
  b.state.skipped = 0;
  b.state.begun = 1;
}
/// The loss scale's finite check, on a gradient's element: an infinite or NaN one skips the step
/// (the update kernels then leave the weights and slots as they are, and the next begin_step does
/// not count it).
LOCKSTEP_HOST_DEVICE inline void mark_not_finite(StepBlock& b, float x) {
  if (!isfinite(x)) b.state.skipped = 1;
}
/// The count once the block's last step has ended (what the next begin_step starts from): between
/// steps, the updates applied so far.
LOCKSTEP_HOST_DEVICE inline std::int64_t count_after_step(const StepState& s) {
  return s.iterations + (s.begun && !s.skipped ? 1 : 0);
}
/// After the loss scale's finite checks of a step: the scale moved by its rule
/// (loss_scale_math::update), the step finite unless a check marked it skipped.
LOCKSTEP_HOST_DEVICE inline void update_loss_scale(StepBlock& b, std::int64_t growth_steps) {
  loss_scale_math::update(b.loss_scale, b.state.skipped == 0, growth_steps);
}
/// What a gradient's elements are multiplied by to unscale them (1/scale as float32).
LOCKSTEP_HOST_DEVICE inline float unscale_factor(const StepBlock& b) {
  return loss_scale_math::unscale_factor(b.loss_scale.scale);
}
/// Sets the count (a checkpoint restored, set_iterations): the next step applies.
LOCKSTEP_HOST_DEVICE inline void set_step(StepBlock& b, std::int64_t iterations) {
  b.state.iterations = iterations;
  b.state.skipped = 0;
  b.state.begun = 0;
}

}  // namespace lockstep::step_state
