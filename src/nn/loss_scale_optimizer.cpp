#include "lockstep/optimizers/loss_scale_optimizer.hpp"

#include <cmath>

#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_loss_scale.hpp"
#include "lockstep/tensor/step_capture.hpp"

namespace lockstep::optimizers {

LossScaleOptimizer::LossScaleOptimizer(OptimizerPtr inner, LossScaleOptions options)
    : Optimizer(inner ? inner->options() : OptimizerOptions{}), inner_(std::move(inner)), options_(options),
      scale_(options.initial_scale) {
  LOCKSTEP_CHECK(inner_ != nullptr, "LossScaleOptimizer: the inner optimizer is null");
  LOCKSTEP_CHECK(dynamic_cast<const LossScaleOptimizer*>(inner_.get()) == nullptr,
                 "LossScaleOptimizer: the inner optimizer is a LossScaleOptimizer already");
  LOCKSTEP_CHECK(std::isfinite(options.initial_scale) && options.initial_scale >= 1,
                 "LossScaleOptimizer: initial_scale must be a finite number >= 1, got ", options.initial_scale);
  LOCKSTEP_CHECK(options.dynamic_growth_steps >= 1, "LossScaleOptimizer: dynamic_growth_steps must be >= 1, got ",
                 options.dynamic_growth_steps);
  set_iterations(inner_->iterations());
  // One rate, the inner optimizer's, as Keras 3's wrapper forwards learning_rate to it: a rate set
  // on the inner optimizer (a callback holding it) reaches the wrapper's steps.
  share_rate_of(*inner_);
}

bool LossScaleOptimizer::built() const { return state_set_ || Optimizer::built() || inner_->built(); }

Tensor LossScaleOptimizer::scale_loss(const Tensor& loss) const {
  return scale(loss, loss_scale_math::loss_factor(1.0, scale_));
}

bool LossScaleOptimizer::usable(std::vector<Tensor>& grads, Tensor& step_block) const {
  if (!step_block.defined()) return true;  // no variable: nothing to check or update
  for (auto& g : grads)
    if (g.defined()) g = unscale_check(g, step_block);
  // In a capture the update kernels skip on the device and the host counts the step as applied
  // until it asks (catch_up_with_device); an eager step reads the mark, which a capture never repeats.
  if (StepGraph::capturing_here()) return true;
  const StepCaptureCheck::OnThisThread unwatched(nullptr);
  return !step_skipped(step_block);
}

double LossScaleOptimizer::loss_scale() const {
  catch_up_with_device();
  return scale_;
}

std::int64_t LossScaleOptimizer::step_counter() const {
  catch_up_with_device();
  return counter_;
}

std::int64_t LossScaleOptimizer::skipped_steps() const {
  catch_up_with_device();
  return skipped_;
}

void LossScaleOptimizer::write_block_state(Tensor& block) const {
  set_loss_scale_(block, {.scale = scale_, .counter = counter_, .skipped = skipped_});
}

void LossScaleOptimizer::read_block_state(const Tensor& block) const {
  const loss_scale_math::LossScaleState s = loss_scale_state(block);
  scale_ = s.scale;
  counter_ = s.counter;
  skipped_ = s.skipped;
}

void LossScaleOptimizer::update_scale(bool finite) {
  follow_block_update(finite);
  block_state_changed();  // the blocks take the host's scale before their next step
}

void LossScaleOptimizer::update_scale_in_block(Tensor step_block) const {
  if (step_block.defined()) update_loss_scale_(step_block, options_.dynamic_growth_steps);
}

void LossScaleOptimizer::follow_block_update(bool finite) {
  loss_scale_math::LossScaleState s{.scale = scale_, .counter = counter_, .skipped = skipped_};
  loss_scale_math::update(s, finite, options_.dynamic_growth_steps);
  scale_ = s.scale;
  counter_ = s.counter;
  skipped_ = s.skipped;
}

void LossScaleOptimizer::set_state(double scale, std::int64_t counter, std::int64_t skipped) {
  LOCKSTEP_CHECK(std::isfinite(scale) && scale >= 1 && counter >= 0 && skipped >= 0,
                 "LossScaleOptimizer: bad state (scale ", scale, ", counter ", counter, ", skipped ", skipped, ")");
  catch_up_with_device();  // the replays' count read before the host sets the scale
  scale_ = scale;
  counter_ = counter;
  skipped_ = skipped;
  state_set_ = true;
  block_state_changed();
}

void LossScaleOptimizer::update_all(const std::vector<Variable>& vars, const std::vector<Tensor>& grads,
                                    const Tensor& step_block) {
  inner_->update_all(vars, grads, step_block);
}

std::vector<std::string> LossScaleOptimizer::slot_names() const { return inner_->slot_names(); }

OptimizerPtr LossScale(OptimizerPtr inner, LossScaleOptions options) {
  return std::make_shared<LossScaleOptimizer>(std::move(inner), options);
}

}  // namespace lockstep::optimizers
