#pragma once
// Keras metrics, stateful. A metric's state is a few float64 numbers (e.g. total and count).
// batch_state() computes one batch's contribution on the batch's device, as a float32 tensor;
// under a strategy each replica computes its own, Strategy::reduce sums them, and
// merge_state() adds the sum to the running state — one host read per step, not per replica.
// A custom loop may also call update_state() inside strategy.run, as in TF: each replica then
// adds to its own share of the state (TF's SyncOnRead metric variables), and reading the
// state (result(), state()) outside folds the shares in replica order, so the result is the
// same on every run.
// Sample weights (Keras' update_state(y_true, y_pred, sample_weight), and compile's
// weighted_metrics): weighted_batch_state() is [sum of w * value, sum of w] over the metric's
// values(), the arithmetic of Keras 3's Mean (keras/src/metrics/reduction_metrics.py,
// reduce_to_samplewise_values): a weighted mean, sum(w * v) / sum(w). Weights of all ones give the
// bits of no weights.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::metrics {

/// The weights of a metric that applies masks (Metric::applies_masks; Keras' MeanMetricWrapper:
/// apply_mask with the "sum" reduction, losses/reduction.hpp): `sample_weight` (undefined: none)
/// times the mask's ones and zeros, one per position of the mask ([B, T]); sample_weight itself
/// where `mask` is undefined. ValueError naming sample_weight for a shape that does not fit.
Tensor mask_weights(const Tensor& sample_weight, const Tensor& mask);

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric() = default;
  const std::string& name() const { return name_; }
  /// Keras names a metric of a model's output "<output>_<metric>" (compile does).
  void set_name(std::string name) { name_ = std::move(name); }
  /// One batch's contribution to state(), as a float32 tensor of state().size() values (zeros
  /// for an empty batch). Const: replicas may call it concurrently.
  virtual Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const = 0;
  /// Adds a (possibly cross-replica summed) batch_state() to the running state: its values are
  /// read to the host and merged as below.
  void merge_state(const Tensor& batch_state);
  /// The same for a batch state already on the host (a model's step numbers, read in one vector):
  /// the one place a state is added to another. ValueError unless it holds state().size() values.
  void merge_state(std::span<const float> batch_state);
  /// merge_state(batch_state(y_true, y_pred))
  void update_state(const Tensor& y_true, const Tensor& y_pred) { merge_state(batch_state(y_true, y_pred)); }
  /// The values whose mean the metric is (Keras' MeanMetricWrapper's per-example values), float32
  /// of shape (B,), or (B, P) where each example has P positions (a label per position): what
  /// batch_state() sums, [sum(values), values.numel()]. ValueError for a metric class that has
  /// none (a class of the user's own), naming it: such a metric takes no sample weights.
  virtual Tensor values(const Tensor& y_true, const Tensor& y_pred) const;
  /// The values a weight per position (B, P) weighs where values() gives one per example (B,):
  /// Accuracy's of an output (B, steps), whose values() are each example's mean (Keras' state
  /// without weights) and these each step's comparison. This base: values().
  virtual Tensor position_values(const Tensor& y_true, const Tensor& y_pred) const { return values(y_true, y_pred); }
  /// Whether a model's output mask weighs this metric's values (Keras' MeanMetricWrapper, which
  /// every built-in metric but Mean is: its update_state applies y_pred's mask); a metric class of
  /// the user's own sees no mask, as Keras' Metric.
  virtual bool applies_masks() const { return false; }
  /// batch_state() with Keras' sample_weight (undefined: batch_state() itself): the weights of
  /// shape (B,) or (B, 1), one per example, give [sum(w * values), P * sum(w)]; of values()'
  /// shape (B, P), one per position, [sum(w * values), sum(w)] (Keras 3's result for both: the
  /// mean of each example's values weighted by its weight). Any dtype, cast to float32.
  /// ValueError naming sample_weight for another shape. On the batch's device, capturable.
  Tensor weighted_batch_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const;
  /// merge_state(weighted_batch_state(y_true, y_pred, sample_weight)): Keras' update_state with
  /// sample_weight.
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) {
    merge_state(weighted_batch_state(y_true, y_pred, sample_weight));
  }
  /// Keras' update_state(y_true, y_pred, sample_weight) where y_pred carries a Keras `mask`
  /// (Model::call's Output::mask, y_pred._keras_mask; undefined: none): a metric that
  /// applies_masks() weighs its values by mask_weights(sample_weight, mask); another ignores it.
  void update_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight, const Tensor& mask) {
    update_state(y_true, y_pred, applies_masks() ? mask_weights(sample_weight, mask) : sample_weight);
  }
  double result() const {
    const auto& s = state();
    return s[1] > 0 ? s[0] / s[1] : 0.0;
  }
  void reset_state();
  /// [total, count]; result() = total / count. Call outside strategy.run.
  std::vector<double>& state();
  const std::vector<double>& state() const;
  virtual std::shared_ptr<Metric> clone_empty() const = 0;
  /// Keras' class name (keras.metrics.<class_name>) and the options its config holds beside name
  /// and dtype (k, threshold): what metrics::serialize writes (metric_config.hpp). Empty for a
  /// metric class of the user's own, which Keras has no config for.
  virtual std::string class_name() const { return {}; }
  virtual std::map<std::string, double> options() const { return {}; }

 protected:
  /// Adds `delta` to the state, or inside strategy.run to this replica's share of it.
  void add_to_state(const std::vector<double>& delta);

 private:
  /// add_to_state's rule, for float32 values (merge_state) or float64 (add_to_state).
  template <typename T>
  void add_values(std::span<const T> delta);

  void fold_replica_shares() const;

  mutable std::vector<double> state_{0.0, 0.0};
  mutable std::mutex shares_mu_;
  mutable std::vector<std::vector<double>> replica_shares_;  // [replica][i], added by update_state in replicas
  std::string name_;
};
using MetricPtr = std::shared_ptr<Metric>;

/// Running mean of the values passed to update (weighted by `weight`).
class Mean final : public Metric {
 public:
  explicit Mean(std::string name = "mean") : Metric(std::move(name)) {}
  /// [sum of values, count]; the second argument is unused (Keras' Mean takes values only).
  Tensor batch_state(const Tensor& values, const Tensor&) const override;
  /// The values as (B, the rest) (a scalar: (1, 1)); the second argument is unused.
  Tensor values(const Tensor& values, const Tensor&) const override;
  void update(double value, double weight = 1.0) { add_to_state({value * weight, weight}); }
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<Mean>(name()); }
  std::string class_name() const override { return "Mean"; }
};

/// Fraction of examples whose argmax prediction equals the integer label.
class SparseCategoricalAccuracy final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit SparseCategoricalAccuracy(std::string name = "sparse_categorical_accuracy")
      : Metric(std::move(name)) {}
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override {
    return std::make_shared<SparseCategoricalAccuracy>(name());
  }
  std::string class_name() const override { return "SparseCategoricalAccuracy"; }
};

/// keras.metrics.Accuracy: how often y_pred equals y_true exactly, value by value (y_true taken
/// in y_pred's dtype; the mean over every value). Its values() are each example's mean, or each
/// position's mean over the last axis of (b, d1, ..., k), which a mask or weight per position
/// weighs; of (b, steps), a mask or weight per step weighs each step (position_values). Predictions
/// are compared as they are, not rounded: it fits predicted labels, not scores.
class Accuracy final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit Accuracy(std::string name = "accuracy") : Metric(std::move(name)) {}
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor position_values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<Accuracy>(name()); }
  std::string class_name() const override { return "Accuracy"; }
};

/// compile's "accuracy" where the loss does not say which accuracy fits (metric_config.hpp's
/// get): picked by the batch's shapes as Keras 3's compile picks it at its first batch, by y_pred's
/// last axis (a row per example, or per position of a sequence output (b, d1, ..., k)): a last
/// axis of 1, binary_accuracy (a threshold at 0.5); a label per row against class scores,
/// sparse_categorical_accuracy; one-hot rows, categorical_accuracy. Keras has no class for it
/// and writes it as the string, so class_name() is empty and a compile config lists its name.
class AccuracyByShape final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit AccuracyByShape(std::string name = "accuracy") : Metric(std::move(name)) {}
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<AccuracyByShape>(name()); }
};

/// Keras' "mae": the mean over examples of mean(|y_true - y_pred|) over each example's values.
class MeanAbsoluteError final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit MeanAbsoluteError(std::string name = "mean_absolute_error") : Metric(std::move(name)) {}
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<MeanAbsoluteError>(name()); }
  std::string class_name() const override { return "MeanAbsoluteError"; }
};

/// Keras' "mse": the mean over examples of mean((y_true - y_pred)^2) over each example's values.
class MeanSquaredError final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit MeanSquaredError(std::string name = "mean_squared_error") : Metric(std::move(name)) {}
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<MeanSquaredError>(name()); }
  std::string class_name() const override { return "MeanSquaredError"; }
};

/// Keras' "categorical_accuracy": whether each row's top class is its one-hot target's. Integer
/// labels are sparse_categorical_accuracy's; refused by name rather than read as one-hot rows.
class CategoricalAccuracy final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit CategoricalAccuracy(std::string name = "categorical_accuracy") : Metric(std::move(name)) {}
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override { return std::make_shared<CategoricalAccuracy>(name()); }
  std::string class_name() const override { return "CategoricalAccuracy"; }
 private:
  /// The rows (n, classes) y_pred is read as, checked against y_true.
  Shape rows(const Tensor& y_true, const Tensor& y_pred) const;
};

/// Keras' "binary_accuracy": whether y_pred > threshold equals y_true, value by value; the mean
/// over examples of each example's mean. ValueError for a threshold that is not a finite number.
class BinaryAccuracy final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit BinaryAccuracy(std::string name = "binary_accuracy", double threshold = 0.5);
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override {
    return std::make_shared<BinaryAccuracy>(name(), threshold_);
  }
  std::string class_name() const override { return "BinaryAccuracy"; }
  std::map<std::string, double> options() const override { return {{"threshold", threshold_}}; }
  double threshold() const { return threshold_; }

 private:
  double threshold_;
};

/// Keras' "top_k_categorical_accuracy": whether each one-hot target (its argmax) is among the k
/// top scores, by Keras' in_top_k (TF's InTopK): fewer than k scores strictly greater than the
/// target's, so a target tied with the k-th score is in; a row holding a NaN or an infinity is
/// not. A label per position of rank-3 predictions, as sparse_categorical_accuracy.
/// ValueError for k < 1.
class TopKCategoricalAccuracy final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit TopKCategoricalAccuracy(std::int64_t k = 5, std::string name = "top_k_categorical_accuracy");
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override {
    return std::make_shared<TopKCategoricalAccuracy>(k_, name());
  }
  std::string class_name() const override { return "TopKCategoricalAccuracy"; }
  std::map<std::string, double> options() const override { return {{"k", static_cast<double>(k_)}}; }
  std::int64_t k() const { return k_; }

 private:
  std::int64_t k_;
};

/// Keras' "sparse_top_k_categorical_accuracy": TopKCategoricalAccuracy's rule for integer labels
/// (a label outside [0, classes) is a ValueError naming it, as in the sparse loss; Keras counts
/// it a miss). Keras' from_sorted_ids=True has no counterpart here.
class SparseTopKCategoricalAccuracy final : public Metric {
 public:
  bool applies_masks() const override { return true; }
  explicit SparseTopKCategoricalAccuracy(std::int64_t k = 5, std::string name = "sparse_top_k_categorical_accuracy");
  Tensor batch_state(const Tensor& y_true, const Tensor& y_pred) const override;
  Tensor values(const Tensor& y_true, const Tensor& y_pred) const override;
  std::shared_ptr<Metric> clone_empty() const override {
    return std::make_shared<SparseTopKCategoricalAccuracy>(k_, name());
  }
  std::string class_name() const override { return "SparseTopKCategoricalAccuracy"; }
  std::map<std::string, double> options() const override { return {{"k", static_cast<double>(k_)}}; }
  std::int64_t k() const { return k_; }

 private:
  std::int64_t k_;
};

}  // namespace lockstep::metrics
