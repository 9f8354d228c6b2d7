#pragma once
// Keras losses. per_example() returns one loss per example (shape (batch,)); the model sums
// them and divides by the GLOBAL batch size, so N replicas compute what one device would.
#include <memory>
#include <string>

#include "lockstep/losses/reduction.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::losses {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  /// Whether y_pred are logits (crossentropies' option), so a saved model can be recompiled as it was.
  virtual bool from_logits() const { return false; }
  /// y_pred are the model's outputs; `logits`, when defined, are the pre-softmax values of a
  /// softmax output layer, which probability-based losses use for numerical stability.
  virtual Tensor per_example(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const = 0;
  /// per_example for a softmax output layer whose softmax the model's forward left to the loss
  /// (CallContext::softmax_to_loss): sets y_pred = softmax(logits), the model's output, and returns
  /// the per-example losses; sparse categorical cross-entropy computes both in one kernel.
  virtual Tensor per_example_and_softmax(const Tensor& y_true, const Tensor& logits, Tensor& y_pred) const {
    y_pred = softmax(logits);
    return per_example(y_true, y_pred, logits);
  }
  /// Keras' unreduced values (a Loss's call(): the function before its reduction), one per
  /// position: shape (b,) for y_pred (b, k), and (b, d1, ...) for y_pred (b, d1, ..., k), where
  /// per_example() is each example's mean of them. What an output's mask and per-position sample
  /// weights weigh (sample_weights.hpp). The default: per_example() (a loss of one value per example).
  virtual Tensor per_position(const Tensor& y_true, const Tensor& y_pred, const Tensor& logits) const {
    return per_example(y_true, y_pred, logits);
  }
  /// Keras' reduction="none": one loss per example, e.g. for compute_average_loss in a custom loop.
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const { return per_example(y_true, y_pred, Tensor()); }
  /// Mean over the batch (Keras' default sum_over_batch_size reduction).
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const {
    return mean(per_example(y_true, y_pred, Tensor()));
  }
  /// Keras 3's loss(y_true, y_pred, sample_weight) (Loss.__call__) where y_pred carries a Keras
  /// `mask` (Model::call's Output::mask, Keras' y_pred._keras_mask; undefined: none): per_position()
  /// weighed by `sample_weight` (undefined: none) and by the mask, then reduced
  /// (reduce_weighted_values, reduction.hpp). With a mask and the default reduction, the mean over
  /// the positions the mask keeps.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight, const Tensor& mask = Tensor(),
                    Reduction reduction = Reduction::kSumOverBatchSize) const {
    return reduce_weighted_values(per_position(y_true, y_pred, Tensor()), sample_weight, mask, reduction);
  }
};
using LossPtr = std::shared_ptr<Loss>;

struct CrossentropyOptions {
  bool from_logits = false;
};

/// Labels (b,) against y_pred (b, classes), or as Keras a label per position (b, d1, ...) against
/// (b, d1, ..., classes) (a sequence model's next-token targets): then per_example is each
/// example's mean over its positions, so the reduced loss is Keras' mean over every position.
LossPtr SparseCategoricalCrossentropy(CrossentropyOptions options = {});
LossPtr CategoricalCrossentropy(CrossentropyOptions options = {});
LossPtr BinaryCrossentropy(CrossentropyOptions options = {});
LossPtr MeanSquaredError();
LossPtr MeanAbsoluteError();
/// By Keras name: "sparse_categorical_crossentropy", "categorical_crossentropy",
/// "binary_crossentropy", "mse"/"mean_squared_error", "mae"/"mean_absolute_error".
LossPtr get(const std::string& name);

}  // namespace lockstep::losses
