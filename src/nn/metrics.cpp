#include "lockstep/metrics/metric.hpp"

#include <cmath>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/losses/reduction.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::metrics {

namespace {
// [total, count] as a float32 tensor; `total` stays on the device (a scalar tensor).
Tensor total_and_count(const Tensor& total, std::int64_t count) {
  return concat({total.reshape({1}), Tensor::full({1}, static_cast<double>(count))});
}

// Values of an example's positions, (rows,) read as (b,) or (b, rows / b).
Tensor per_example(const Tensor& values, std::int64_t b) {
  return values.numel() == b ? values.reshape({b}) : values.reshape({b, values.numel() / b});
}

// The values of "mae" and "mse": the mean of error(y_pred - y_true) over each example's values, or
// over each position's last axis.
template <typename Error>
Tensor mean_error_values(const std::string& name, const Tensor& y_true, const Tensor& y_pred, Error error) {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({0});
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name, ": y_true ", y_true.shape().str(), " does not match y_pred ",
                 y_pred.shape().str());
  // Keras' mean over the last axis: a value per example, or per position of (b, d1, ..., k).
  const std::int64_t k = y_pred.rank() > 2 ? y_pred.dim(-1) : y_pred.numel() / n;
  const Shape rows{k ? y_pred.numel() / k : 0, k};
  const Tensor diff = sub(y_pred.to(DType::kF32).reshape(rows), y_true.to(DType::kF32).reshape(rows));
  return per_example(mean(error(diff), -1), n);
}

// The unweighted state of a metric's values(): [sum, count], as Metric::values promises.
Tensor state_of(const Tensor& values) {
  if (values.numel() == 0) return Tensor::zeros({2});
  return total_and_count(sum(values), values.numel());
}

// accuracy_state's rule, row by row (float32 1 or 0 per row of predictions (rows, classes)): the
// values a weighted accuracy weighs. Its counts are accuracy_state's, exactly (0 and 1 sum exactly).
Tensor accuracy_matches(const Tensor& labels, const Tensor& predictions, bool labels_as_float) {
  const std::int64_t rows = predictions.dim(0), cols = predictions.dim(1);
  if (!labels_as_float) return sparse_categorical_matches(labels, predictions);
  const Tensor predicted = argmax(predictions, -1);
  if (cols > 1 && labels.numel() == predictions.numel())  // one-hot rows: their argmax
    return cast(equal(predicted, argmax(labels.to(DType::kF32).reshape({rows, cols}), -1)), DType::kF32);
  LOCKSTEP_CHECK(labels.numel() == rows, "accuracy: labels ", labels.shape().str(), " do not match predictions ",
                 predictions.shape().str());
  return cast(equal(cast(predicted, DType::kF32), labels.to(DType::kF32).reshape({rows})), DType::kF32);
}
}  // namespace

Tensor mask_weights(const Tensor& sample_weight, const Tensor& mask) {
  if (!mask.defined()) return sample_weight;
  return losses::apply_mask(sample_weight, mask, mask.shape(), losses::Reduction::kSum, "the output's mask");
}

void Metric::merge_state(const Tensor& batch_state) {
  const std::vector<float> v = batch_state.to(DType::kF32).to_vector<float>();
  merge_state(std::span<const float>(v));
}

void Metric::merge_state(std::span<const float> batch_state) {
  LOCKSTEP_CHECK(batch_state.size() == state_.size(), "metric '", name_, "': a state of ", batch_state.size(),
                 " values cannot merge into ", state_.size());
  add_values(batch_state);
}

void Metric::add_to_state(const std::vector<double>& delta) { add_values(std::span<const double>(delta)); }

template <typename T>
void Metric::add_values(std::span<const T> delta) {
  const ReplicaInterface* replica = current_replica();
  if (!replica || replica->num_local_replicas() == 1) {  // one thread updates this metric
    for (std::size_t i = 0; i < delta.size(); ++i) state_[i] += static_cast<double>(delta[i]);
    return;
  }
  std::lock_guard<std::mutex> lock(shares_mu_);
  const auto r = static_cast<std::size_t>(replica->replica_id_in_sync_group());
  if (replica_shares_.size() <= r) replica_shares_.resize(r + 1);
  auto& share = replica_shares_[r];
  if (share.empty()) share.assign(state_.size(), 0.0);
  for (std::size_t i = 0; i < delta.size(); ++i) share[i] += static_cast<double>(delta[i]);
}

void Metric::fold_replica_shares() const {
  std::lock_guard<std::mutex> lock(shares_mu_);
  for (auto& share : replica_shares_) {
    for (std::size_t i = 0; i < share.size(); ++i) state_[i] += share[i];
    share.clear();
  }
}

std::vector<double>& Metric::state() {
  fold_replica_shares();
  return state_;
}
const std::vector<double>& Metric::state() const {
  fold_replica_shares();
  return state_;
}

Tensor Metric::values(const Tensor&, const Tensor&) const {
  throw ValueError("metric '" + name_ + "' has no per-example values (Metric::values), so it takes no sample weights");
}

Tensor Metric::weighted_batch_state(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const {
  if (!sample_weight.defined()) return batch_state(y_true, y_pred);
  const Tensor& w = sample_weight;
  Tensor v = values(y_true, y_pred);
  if (w.rank() == 2 && w.dim(1) > 1 && v.rank() < 2) v = position_values(y_true, y_pred);
  const std::int64_t b = v.rank() ? v.dim(0) : 1, p = v.rank() == 2 ? v.dim(1) : 1;
  const bool per_example = losses::one_weight_per_example(w) && w.dim(0) == b;
  const bool per_position = p > 1 && w.rank() == 2 && w.dim(0) == b && w.dim(1) == p;
  LOCKSTEP_CHECK(per_example || per_position, "metric '", name_, "': sample_weight must hold one weight per example "
                 "(shape (", b, ",) or (", b, ", 1))", p > 1 ? " or one per position (shape (" + std::to_string(b) +
                 ", " + std::to_string(p) + "))" : std::string(), ", got shape ", w.shape().str());
  if (v.numel() == 0) return Tensor::zeros({2});
  const Tensor wf = w.to(DType::kF32);
  // Multiplying by a weight of 1 is exact and the sum is batch_state's, so weights of ones give
  // its bits; the count, a sum of ones, is exact too.
  const Tensor total = sum(mul(v, wf.reshape(per_position ? v.shape() : v.rank() == 2 ? Shape{b, 1} : Shape{b})));
  const Tensor count = per_position || p == 1 ? sum(wf) : scale(sum(wf), static_cast<float>(p));
  return concat({total.reshape({1}), count.reshape({1})});
}

void Metric::reset_state() {
  std::lock_guard<std::mutex> lock(shares_mu_);
  replica_shares_.clear();
  for (auto& v : state_) v = 0.0;
}

Tensor Mean::batch_state(const Tensor& values, const Tensor&) const {
  if (values.numel() == 0) return Tensor::zeros({2});
  const Tensor v = values.to(DType::kF32);
  return total_and_count(sum(v), v.numel());
}

Tensor Mean::values(const Tensor& values, const Tensor&) const {
  const Tensor v = values.to(DType::kF32);
  if (v.rank() <= 1) return v.reshape({v.rank() ? v.dim(0) : 1});
  return v.dim(0) ? v.reshape({v.dim(0), v.numel() / v.dim(0)}) : Tensor::zeros({0});
}

Tensor SparseCategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  if (y_pred.dim(0) == 0) return Tensor::zeros({2});
  // Keras' rule for y_pred (b, d1, ..., classes): a label per position, every position counted.
  const std::int64_t classes = y_pred.rank() > 2 ? y_pred.dim(-1) : 0, positions = classes ? y_pred.numel() / classes : 0;
  if (classes) LOCKSTEP_CHECK(y_true.numel() == positions, name(), ": y_true ", y_true.shape().str(),
                              " must hold one label per position of y_pred ", y_pred.shape().str());
  return classes ? accuracy_state(y_true.reshape({positions}), y_pred.reshape({positions, classes}))
                 : accuracy_state(y_true, y_pred);
}

Tensor SparseCategoricalAccuracy::values(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t b = y_pred.dim(0);
  if (b == 0) return Tensor::zeros({0});
  const std::int64_t classes = y_pred.rank() > 2 ? y_pred.dim(-1) : 0, positions = classes ? y_pred.numel() / classes : 0;
  if (!classes) return accuracy_matches(y_true, y_pred, false);
  LOCKSTEP_CHECK(y_true.numel() == positions, name(), ": y_true ", y_true.shape().str(),
                 " must hold one label per position of y_pred ", y_pred.shape().str());
  return per_example(accuracy_matches(y_true.reshape({positions}), y_pred.reshape({positions, classes}), false), b);
}

namespace {
// Accuracy's comparisons of y_pred reduced to `rows` of their mean over the last axis of k values
// (Keras' Mean reducing them to the weights' rank), as (n,) or (n, rows / n).
Tensor accuracy_means(const std::string& name, const Tensor& y_true, const Tensor& y_pred, std::int64_t k) {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({0});
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name, ": y_true ", y_true.shape().str(),
                 " must hold a value per value of y_pred ", y_pred.shape().str(),
                 " (Accuracy compares them value by value; class scores take \"accuracy\" or categorical_accuracy)");
  // Keras casts y_true to y_pred's dtype before comparing; float32 holds both after that.
  const Shape rows{k ? y_pred.numel() / k : 0, k};
  const Tensor p = y_pred.to(DType::kF32).reshape(rows);
  const Tensor t = y_true.to(y_pred.dtype()).to(DType::kF32).reshape(rows);
  return per_example(mean(cast(equal(t, p), DType::kF32), -1), n);
}
}  // namespace

// Keras' values are the comparisons themselves, which its Mean reduces to the weights' rank by
// their mean (reduction_metrics.py, reduce_to_samplewise_values): without weights or with one per
// example, each example's mean; of (b, d1, ..., k), each position's mean over the last axis, which
// a weight per position (b, d1) weighs; of (b, steps), each step's comparison for such a weight
// (position_values: Embedding(mask_zero=True)'s mask or Masking's on a sequence output).
Tensor Accuracy::values(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  return accuracy_means(name(), y_true, y_pred, y_pred.rank() > 2 ? y_pred.dim(-1) : (n ? y_pred.numel() / n : 0));
}

Tensor Accuracy::position_values(const Tensor& y_true, const Tensor& y_pred) const {
  return accuracy_means(name(), y_true, y_pred, y_pred.rank() > 2 ? y_pred.dim(-1) : 1);
}

Tensor Accuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return state_of(values(y_true, y_pred));
}

namespace {
// AccuracyByShape's (rows, columns) of a batch, its targets checked against them: Keras picks by
// y_pred's last axis, a row per example or per position of (b, d1, ..., k); y_pred of rank 1 is a
// column of one per example.
std::pair<std::int64_t, std::int64_t> by_shape_rows(const Tensor& y_true, const Tensor& y_pred) {
  const std::int64_t cols = y_pred.rank() >= 2 ? y_pred.dim(-1) : 1;
  const std::int64_t rows = cols ? y_pred.numel() / cols : 0;
  LOCKSTEP_CHECK(rows == 0 || y_true.numel() == rows || y_true.numel() == y_pred.numel(), "accuracy: y_true ",
                 y_true.shape().str(), " does not match y_pred ", y_pred.shape().str(),
                 " (a label or target per row of its last axis, or one-hot rows)");
  return {rows, cols};
}
}  // namespace

Tensor AccuracyByShape::values(const Tensor& y_true, const Tensor& y_pred) const {
  const auto [rows, cols] = by_shape_rows(y_true, y_pred);
  if (rows == 0) return Tensor::zeros({0});
  const std::int64_t b = y_pred.rank() ? y_pred.dim(0) : 1;
  if (cols == 1) {  // binary: threshold at 0.5
    const Tensor p = y_pred.to(DType::kF32).reshape({rows});
    const Tensor t = y_true.to(DType::kF32).reshape({rows});
    return per_example(cast(equal(cast(greater(p, Tensor::scalar(0.5)), DType::kF32), t), DType::kF32), b);
  }
  return per_example(accuracy_matches(y_true.numel() == rows ? y_true.reshape({rows}) : y_true.reshape({rows, cols}),
                                      y_pred.reshape({rows, cols}), /*labels_as_float=*/true),
                     b);
}

Tensor AccuracyByShape::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const auto [rows, cols] = by_shape_rows(y_true, y_pred);
  if (rows == 0) return Tensor::zeros({2});
  if (cols == 1) return state_of(values(y_true, y_pred));
  // One-hot targets, or labels (as float32) against class scores: one kernel for the state.
  return accuracy_state(y_true.numel() == rows ? y_true.reshape({rows}) : y_true.reshape({rows, cols}),
                        y_pred.reshape({rows, cols}), /*labels_as_float=*/true);
}

Tensor MeanAbsoluteError::values(const Tensor& y_true, const Tensor& y_pred) const {
  return mean_error_values(name(), y_true, y_pred, [](const Tensor& diff) { return abs(diff); });
}

Tensor MeanAbsoluteError::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return state_of(values(y_true, y_pred));
}

Tensor MeanSquaredError::values(const Tensor& y_true, const Tensor& y_pred) const {
  return mean_error_values(name(), y_true, y_pred, [](const Tensor& diff) { return square(diff); });
}

Tensor MeanSquaredError::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return state_of(values(y_true, y_pred));
}

// CategoricalAccuracy's rows (n, cols), checked; n = 0 for an empty batch.
Shape CategoricalAccuracy::rows(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Shape{0, 0};
  // Keras' argmax over the last axis: a row per example, or per position of (b, d1, ..., classes).
  const std::int64_t cols = y_pred.rank() > 2 ? y_pred.dim(-1) : y_pred.numel() / n;
  LOCKSTEP_CHECK(cols > 1 && y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must be one-hot rows like y_pred ", y_pred.shape().str(),
                 " (of 2 or more classes; integer labels take sparse_categorical_accuracy)");
  return Shape{y_pred.numel() / cols, cols};
}

Tensor CategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const Shape r = rows(y_true, y_pred);
  if (r[0] == 0) return Tensor::zeros({2});
  return accuracy_state(y_true.reshape(r), y_pred.reshape(r), /*labels_as_float=*/true);
}

Tensor CategoricalAccuracy::values(const Tensor& y_true, const Tensor& y_pred) const {
  const Shape r = rows(y_true, y_pred);
  if (r[0] == 0) return Tensor::zeros({0});
  return per_example(accuracy_matches(y_true.reshape(r), y_pred.reshape(r), /*labels_as_float=*/true), y_pred.dim(0));
}

BinaryAccuracy::BinaryAccuracy(std::string name, double threshold) : Metric(std::move(name)), threshold_(threshold) {
  LOCKSTEP_CHECK(std::isfinite(threshold), "BinaryAccuracy '", this->name(), "': threshold must be a finite number, got ",
                 threshold);
}

Tensor BinaryAccuracy::values(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({0});
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must hold a target per value of y_pred ", y_pred.shape().str());
  // Keras' mean over the last axis: a value per example, or per position of (b, d1, ..., k).
  const std::int64_t k = y_pred.rank() > 2 ? y_pred.dim(-1) : y_pred.numel() / n;
  const Shape rows{k ? y_pred.numel() / k : 0, k};
  const Tensor predicted = cast(greater(y_pred.to(DType::kF32).reshape(rows), Tensor::scalar(threshold_)), DType::kF32);
  const Tensor matches = cast(equal(predicted, y_true.to(DType::kF32).reshape(rows)), DType::kF32);
  return per_example(mean(matches, -1), n);
}

Tensor BinaryAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return state_of(values(y_true, y_pred));
}

namespace {
std::int64_t checked_k(const std::string& metric, std::int64_t k) {
  LOCKSTEP_CHECK(k >= 1, metric, ": k must be a positive integer, got ", k);
  return k;
}

// Keras' in_top_k (TF's InTopK kernel) per row of scores (rows, classes), the target marked by a
// one-hot row: 1 where fewer than k scores are strictly greater than the target's (a tie with the
// k-th score is in), 0 where the row holds a NaN or an infinity anywhere. Composed of elementwise
// ops and row sums, so it runs wherever they do, captured steps included.
Tensor in_top_k(const Tensor& target_rows, const Tensor& scores, std::int64_t k) {
  const Tensor target = sum(mul(target_rows, scores), -1, /*keepdims=*/true);  // exact: one 1, the rest 0
  const Tensor above = sum(cast(greater(scores, target), DType::kF32), -1);
  // 0 for a row of finite scores, NaN for any other (0 * inf is NaN too), and NaN < k is false.
  const Tensor not_finite = sum(scale(scores, 0.0f), -1);
  return cast(less(add(above, not_finite), Tensor::scalar(static_cast<double>(k))), DType::kF32);
}

// A top-k metric's rows: (positions, classes) of y_pred of rank 2 or more, or a ValueError naming
// the metric.
Shape score_rows(const std::string& metric, const Tensor& y_pred) {
  LOCKSTEP_CHECK(y_pred.rank() >= 2 && y_pred.dim(-1) > 0, metric, ": y_pred ", y_pred.shape().str(),
                 " must hold a score per class (rank 2 or more)");
  return Shape{y_pred.numel() / y_pred.dim(-1), y_pred.dim(-1)};
}

}  // namespace

TopKCategoricalAccuracy::TopKCategoricalAccuracy(std::int64_t k, std::string name)
    : Metric(std::move(name)), k_(checked_k(this->name(), k)) {}

Tensor TopKCategoricalAccuracy::values(const Tensor& y_true, const Tensor& y_pred) const {
  const Shape rows = score_rows(name(), y_pred);
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must be one-hot rows like y_pred ", y_pred.shape().str(),
                 " (integer labels take sparse_top_k_categorical_accuracy)");
  if (rows[0] == 0) return Tensor::zeros({0});
  const Tensor scores = y_pred.to(DType::kF32).reshape(rows);
  // Keras' target is the one-hot row's argmax (the first largest).
  const Tensor targets = one_hot(argmax(y_true.to(DType::kF32).reshape(rows)), rows[1]);
  return per_example(in_top_k(targets, scores, k_), y_pred.dim(0));
}

Tensor TopKCategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return state_of(values(y_true, y_pred));
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(std::int64_t k, std::string name)
    : Metric(std::move(name)), k_(checked_k(this->name(), k)) {}

Tensor SparseTopKCategoricalAccuracy::values(const Tensor& y_true, const Tensor& y_pred) const {
  const Shape rows = score_rows(name(), y_pred);
  LOCKSTEP_CHECK(y_true.numel() == rows[0], name(), ": y_true ", y_true.shape().str(),
                 " must hold one integer label per row of y_pred ", y_pred.shape().str(),
                 " (one-hot rows take top_k_categorical_accuracy)");
  LOCKSTEP_CHECK(!is_floating(y_true.dtype()), name(), ": labels must be integers, got ", dtype_name(y_true.dtype()));
  if (rows[0] == 0) return Tensor::zeros({0});
  return per_example(in_top_k(one_hot(y_true.reshape({rows[0]}), rows[1]), y_pred.to(DType::kF32).reshape(rows), k_),
                     y_pred.dim(0));
}

Tensor SparseTopKCategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return state_of(values(y_true, y_pred));
}

}  // namespace lockstep::metrics
