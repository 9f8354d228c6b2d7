#pragma once
// Keras' LossScaleOptimizer: dynamic loss scaling for float16 training. The loss is multiplied
// by the scale before differentiation, so that small gradients do not underflow float16; the
// gradients are divided by it before the update. A step whose gradients are not all finite is
// skipped and the scale halved; after `dynamic_growth_steps` finite steps in a row it doubles.
// compile() wraps the optimizer in one under the mixed_float16 policy, as Keras does.
//
// Its update takes the one route of every optimizer (apply_gradients_in_replica): the
// gradients are summed over the replicas (never sharded: the check needs every gradient), then
// unscaled and checked on the device into the replica's step block (usable), then the inner rule
// runs unless one is infinite or NaN. The check needs no extra collective: the sums, and so the
// decision, are the same on every replica.
// In a custom loop (inside strategy.run, or alone with a null replica):
//   auto grads = tape.gradient(lso.scale_loss(loss), vars);
//   const auto done = lso.apply_gradients_in_replica(get_replica_context(), grads, vars, step);
//   ... then once per step, outside the replicas:
//   lso.update_scale(done != Optimizer::StepOutcome::kSkipped);  // and finish_step() if applied
// (apply_gradients does the same within a step and counts it; update_scale stays the caller's.)
#include <atomic>
#include <cstdint>
#include <vector>

#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::optimizers {

struct LossScaleOptions {
  double initial_scale = 32768.0;  // 2^15, Keras' default
  std::int64_t dynamic_growth_steps = 2000;
};

class LossScaleOptimizer final : public Optimizer {
 public:
  explicit LossScaleOptimizer(OptimizerPtr inner, LossScaleOptions options = {});
  /// The inner rule's name, so that a saved model rebuilds the rule (its policy rewraps it).
  std::string name() const override { return inner_->name(); }
  std::map<std::string, double> hyperparameters() const override { return inner_->hyperparameters(); }
  std::vector<std::pair<std::string, Tensor>> slots(const Variable& v) override { return inner_->slots(v); }
  void broadcast_slots(const Variable& v) override { inner_->broadcast_slots(v); }
  std::vector<std::string> slot_names() const override;
  const OptimizerPtr& inner_optimizer() const { return inner_; }
  const LossScaleOptions& loss_scale_options() const { return options_; }
  /// Its own steps begun, or its inner optimizer's slots made, or a scale set (set_state).
  bool built() const override;

  /// The scale (after replayed steps, read from the device once: catch_up_with_device).
  double loss_scale() const;
  /// Finite steps since the scale last changed.
  std::int64_t step_counter() const;
  /// Steps skipped because a gradient was infinite or NaN.
  std::int64_t skipped_steps() const;
  /// The loss times the scale: what to differentiate.
  Tensor scale_loss(const Tensor& loss) const;
  /// Once per step: count a finite step (doubling the scale after dynamic_growth_steps of them)
  /// or halve the scale and count a skipped step; the replicas' blocks take the new scale before
  /// their next step.
  void update_scale(bool finite);
  /// fit's, instead of update_scale: each replica's block moves its own scale after the step's
  /// checks, on the device (update_loss_scale_: captured with the step), and the host's copy
  /// follows an eager step's outcome (follow_block_update); after replays it is read back when
  /// asked (catch_up_with_device).
  void update_scale_in_block(Tensor step_block) const;
  void follow_block_update(bool finite);
  /// For checkpoints and Keras files: the scale, the growth counter and the skipped count.
  void set_state(double scale, std::int64_t counter, std::int64_t skipped);

 protected:
  void update_all(const std::vector<Variable>& vars, const std::vector<Tensor>& grads,
                  const Tensor& step_block) override;
  void update_rule(Tensor& w, std::vector<Tensor>& slots, const Tensor& grad, const Tensor& step_block) override {
    inner_->update_rule(w, slots, grad, step_block);
  }
  void describe_step(step_state::StepRule& rule) const override { inner_->describe_step(rule); }
  /// Never sharded: unscaling checks every gradient for inf/NaN first.
  bool elementwise() const override { return false; }
  /// Unscales and checks the gradients on the device (by the block's scale: unscale_check), then
  /// whether the block's step applies: read on an eager
  /// step (one read a step), never inside a capture (the update kernels skip on the device; the
  /// host reads the outcome when asked, catch_up_with_device).
  bool usable(std::vector<Tensor>& grads, Tensor& step_block) const override;
  /// The host's scale, counter and skipped count into a block / back from copy 0's.
  void write_block_state(Tensor& block) const override;
  bool skips_on_device() const override { return true; }
  void read_block_state(const Tensor& block) const override;

 private:
  OptimizerPtr inner_;
  LossScaleOptions options_;
  // The host's copy of the scale's state; after replays, read back from the device when asked
  // (read_block_state).
  mutable double scale_;
  mutable std::int64_t counter_ = 0;
  mutable std::int64_t skipped_ = 0;
  bool state_set_ = false;  // set_state was called
};

/// Wraps `inner` (which must not be one already).
OptimizerPtr LossScale(OptimizerPtr inner, LossScaleOptions options = {});

}  // namespace lockstep::optimizers
