#include "lockstep/optimizers/loss_scale_optimizer.hpp"

#include <cmath>

#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/tensor/ops.hpp"
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
}

Tensor LossScaleOptimizer::scale_loss(const Tensor& loss) const {
  return scale(loss, loss_scale_math::loss_factor(1.0, scale_));
}

void LossScaleOptimizer::unscale(std::vector<Tensor>& grads, Tensor& step_block) const {
  const float inverse = loss_scale_math::unscale_factor(scale_);
  for (auto& g : grads) {
    if (!g.defined()) continue;
    g = scale(g, inverse);
    finite_check_(g, step_block);
  }
}

bool LossScaleOptimizer::usable(std::vector<Tensor>& grads, Tensor& step_block) const {
  if (!step_block.defined()) return true;  // no variable: nothing to check or update
  unscale(grads, step_block);
  if (StepCaptureCheck* check = current_step_capture_check())
    check->block("the loss scale's finite check reads the step's skipped mark on the host");
  return !step_skipped(step_block);
}

void LossScaleOptimizer::update_scale(bool finite) {
  loss_scale_math::LossScaleState s{.scale = scale_, .counter = counter_, .skipped = skipped_};
  loss_scale_math::update(s, finite, options_.dynamic_growth_steps);
  scale_ = s.scale;
  counter_ = s.counter;
  skipped_ = s.skipped;
}

void LossScaleOptimizer::set_state(double scale, std::int64_t counter, std::int64_t skipped) {
  LOCKSTEP_CHECK(std::isfinite(scale) && scale >= 1 && counter >= 0 && skipped >= 0,
                 "LossScaleOptimizer: bad state (scale ", scale, ", counter ", counter, ", skipped ", skipped, ")");
  scale_ = scale;
  counter_ = counter;
  skipped_ = skipped;
}

void LossScaleOptimizer::update(const Variable& var, const Tensor& grad, const Tensor& step_block) {
  inner_->update(var, grad, step_block);
}

std::vector<std::string> LossScaleOptimizer::slot_names() const { return inner_->slot_names(); }

OptimizerPtr LossScale(OptimizerPtr inner, LossScaleOptions options) {
  return std::make_shared<LossScaleOptimizer>(std::move(inner), options);
}

}  // namespace lockstep::optimizers
