#pragma once
// Keras' sample_weight and class_weight: how weights join a batch and how they weigh its losses.
// An element holds the inputs, the targets, then the sample weights (Keras' (x, y, sample_weight)),
// so they travel the one input path with their rows: every replica gets its slice's weights.
//
// Keras 3's arithmetic (keras/src/losses/loss.py, reduce_weighted_values and reduce_values, with
// the default reduction "sum_over_batch_size"): each example's loss times its weight, summed, then
// divided by the number of examples (not by the weights' sum). The model divides every replica's
// sum by the global batch's size, as without weights, so N replicas compute what one device would,
// and all-ones weights give the bits of no weights. The "loss" log is that mean, averaged over the
// batches by their sizes (Keras' loss tracker). compile's metrics are not weighted: Keras 3 weights
// only weighted_metrics (compile_utils.py, CompileMetrics.update_state; Model::add_weighted_metrics),
// each with its output's weights.
//
// Positions. An output of positions (b, d1, ..., k: a sequence model's) has a loss per position
// (Loss::per_position). Keras weighs those by a sample weight per position, shape (b, d1 * ...),
// and by the output's Keras mask (Model::Output::mask, from Embedding(mask_zero=true)): the loss is
// sum(w * mask * loss) / sum(mask) over the batch, masked positions left out (apply_mask's
// total / valid), and each metric the mean of its values over the positions the mask keeps
// (MeanMetricWrapper's apply_mask, reduction "sum"). The mask's count is each replica's own, as
// Keras' under MirroredStrategy (each replica's loss is its own batch's, scaled by 1 / replicas):
// with masks, N replicas compute one device's loss only where each replica's slice keeps as many
// positions.
#include <cstddef>
#include <map>
#include <vector>

#include "lockstep/data/dataset.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// The in-memory tensors of fit or evaluate (inputs, then targets) with the sample weights joined
/// as their last components, each checked and read as float32 (N,), so that a split keeps each
/// row's weight: `sample_weight` (one array for every output), or `per_output` (one array per
/// output of `model`, in its order); neither: `xy` as it is. ValueError naming sample_weight (and
/// the output): both given, another number of arrays than outputs, a weight not finite, another
/// number of weights than examples, another shape than (N,) or (N, 1).
data::Element with_sample_weights(const Model& model, data::Element xy, const Tensor& sample_weight,
                                  const std::vector<Tensor>& per_output, const char* what);

/// fit's sample weights (one array, or one per output) and class_weight: at most one of them
/// (Keras' words otherwise).
void check_one_kind_of_weights(bool sample_weights, const std::map<int, double>& class_weight, const char* what);

/// ValueError in Keras' words if `given` (sample weights beside it): fit and evaluate on a dataset,
/// whose elements carry their weights themselves.
void check_no_sample_weight_beside(bool given, const char* what);

/// fit's class_weight on a dataset of (inputs, target) batches: each batch gains its weights, as
/// Keras' TFDatasetAdapter maps make_class_weight_map_fn over it. A batch that has sample weights
/// already is a ValueError at that batch.
data::Dataset with_class_weights(const Model& model, const data::Dataset& dataset,
                                 const std::map<int, double>& class_weight);

/// Keras 3's class_weight_to_sample_weights (trainers/data_adapters/data_adapter_utils.py): one
/// float32 weight per row of `y`, its class's, where the class is y rounded to an integer (half to
/// even, as np.round), or the argmax of a one-hot row (y of shape (N, C), C > 1); a class absent
/// from the map weighs 1. y of rank above 2: ValueError.
Tensor class_weights(const Tensor& y, const std::map<int, double>& class_weight);

/// One output's losses under `loss`, one per example (shape (B,)), weighted as Keras 3 weighs
/// them (above): by `weight` (undefined: none; any dtype) of shape (B,) or (B, 1), one per example,
/// or (B, P) or the per-position losses' shape, one per position; and by o.mask. Where the forward
/// left a softmax output's softmax to the loss (CallContext::softmax_to_loss: o.output undefined,
/// o.logits set), the loss computes it beside and sets o.output, which the metrics read.
/// ValueError naming sample_weight or the mask for a shape that does not fit. On the device,
/// captured with the step.
Tensor output_losses(const losses::Loss& loss, const Tensor& y, Model::Output& o, const Tensor& weight);

}  // namespace lockstep::detail
