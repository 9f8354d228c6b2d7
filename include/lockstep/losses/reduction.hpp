#pragma once
// Keras 3's weighing and reduction of a loss's values (keras/src/losses/loss.py: apply_mask,
// reduce_weighted_values): the one place where sample weights and an output's Keras mask weigh
// the values of a loss (fit and evaluate's, and Loss's own call in a custom loop) or of a metric
// (Keras' MeanMetricWrapper applies y_pred's mask with apply_mask's "sum" reduction).
//
// A loss's values are Loss::per_position()'s, shape (B, d1, ...): one per example (B,), or one per
// position of a sequence output. A mask (Model::Output::mask, Keras' y_pred._keras_mask) marks
// the positions that count: nonzero kept, zero left out.
#include <string>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::losses {

/// Keras' reductions: "sum_over_batch_size" (the default: the weighted values' sum over their
/// number, so a mask makes it the mean over the kept positions), "sum", and "none" (the weighted
/// values themselves).
enum class Reduction { kSumOverBatchSize, kSum, kNone };

/// By Keras' name: "sum_over_batch_size" (also "auto" and "mean", Keras' older names of it),
/// "sum", "none". ValueError naming the choices for another.
Reduction reduction_from_name(const std::string& name);

/// Whether sample weights are one per example: shape (B,) or (B, 1).
bool one_weight_per_example(const Tensor& sample_weight);

/// Keras' apply_mask, with its rule for the weights' shape: the float32 weights of values of shape
/// `of` (B, d1, ...), or undefined where both sample_weight and mask are:
///   - `sample_weight` (undefined: none; any dtype): a scalar, weighing every value; one per
///     example, (B,) or (B, 1), given as (B, 1); one per position, (B, d1 * ...) or `of` itself,
///     given as (B, P);
///   - times `mask` (undefined: none; any dtype, `of`'s number of values, nonzero where a position
///     counts), given as (B, P): a kept position weighs 1, or for kSumOverBatchSize total / kept,
///     so that the mean over every position is the mean over the kept ones (0 everywhere where
///     none is kept, as Keras' divide_no_nan).
/// ValueError naming sample_weight, or the mask, for a shape that does not fit; `what` names the
/// values in the message ("its loss").
Tensor apply_mask(const Tensor& sample_weight, const Tensor& mask, const Shape& of, Reduction reduction,
                  const std::string& what = "the loss");

/// Keras' reduce_weighted_values: `values` (B, d1, ...) times apply_mask's weights, then reduced:
/// kNone gives those values (values' shape), kSum their sum, kSumOverBatchSize their sum over their
/// number (0 for no values). Recorded: a custom loop's gradient flows back to `values`.
Tensor reduce_weighted_values(const Tensor& values, const Tensor& sample_weight, const Tensor& mask,
                              Reduction reduction);

}  // namespace lockstep::losses
