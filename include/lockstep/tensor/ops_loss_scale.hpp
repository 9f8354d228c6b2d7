#pragma once
// The dynamic loss scale kept in a step block on the device (StepBlock::loss_scale,
// lockstep/core/loss_scale_math.hpp's rule): a step takes its loss factor and unscales and
// checks its gradients there, and the scale moves there, so a loss-scaled step reads nothing
// back and can be captured. Blocks: see step_block() in lockstep/tensor/ops.hpp.
#include <cstdint>

#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// Writes `state` into the block (before a step, never inside one: a replay would repeat it).
void set_loss_scale_(Tensor& block, const loss_scale_math::LossScaleState& state);
/// The block's loss scale, read back (the host's copy of it, where asked).
loss_scale_math::LossScaleState loss_scale_state(const Tensor& block);
/// The output gradient of a step's per-example float32 `losses` (one kernel, a tensor of their
/// shape): f * weight at every loss, finite or not, the bits of scale(scale(sum(losses), weight), f)
/// differentiated (`weight` an output's in a model of several),
/// f = loss_factor(inverse_n, the block's scale) when `block` is defined (read on the device),
/// else `factor`. `losses` undefined: the float32 scalar f * weight on the block's device (the
/// output gradient of a summed loss).
Tensor loss_seed(const Tensor& losses, const Tensor& block, double inverse_n, float factor, float weight = 1.0f);
/// scale(g, unscale_factor(the block's scale)), and the loss scale's finite check of it in the
/// same pass (a kernel, reading nothing back): an infinite or NaN element marks the block's step
/// skipped, so that the updates leave the weights and slots untouched and the next step_begin_
/// does not count it (then clears the mark).
Tensor unscale_check(const Tensor& g, Tensor& block);
/// After the step's checks: the block's scale moved by loss_scale_math::update.
void update_loss_scale_(Tensor& block, std::int64_t growth_steps);

}  // namespace lockstep
