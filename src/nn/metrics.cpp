#include "lockstep/metrics/metric.hpp"

#include <cmath>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::metrics {

namespace {
// [total, count] as a float32 tensor; `total` stays on the device (a scalar tensor).
Tensor total_and_count(const Tensor& total, std::int64_t count) {
  return concat({total.reshape({1}), Tensor::full({1}, static_cast<double>(count))});
}

// The state of "mae" and "mse": the sum over examples of the mean of error(y_pred - y_true) over
// each example's values, and the count of examples.
template <typename Error>
Tensor mean_error_state(const std::string& name, const Tensor& y_true, const Tensor& y_pred, Error error) {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({2});
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name, ": y_true ", y_true.shape().str(), " does not match y_pred ",
                 y_pred.shape().str());
  const Shape rows{n, y_pred.numel() / n};
  const Tensor diff = sub(y_pred.to(DType::kF32).reshape(rows), y_true.to(DType::kF32).reshape(rows));
  return total_and_count(sum(mean(error(diff), -1)), n);
}
}  // namespace

void Metric::merge_state(const Tensor& batch_state) {
  const std::vector<float> v = (batch_state.dtype() == DType::kF32 ? batch_state : batch_state.to(DType::kF32)).to_vector<float>();
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

void Metric::reset_state() {
  std::lock_guard<std::mutex> lock(shares_mu_);
  replica_shares_.clear();
  for (auto& v : state_) v = 0.0;
}

Tensor Mean::batch_state(const Tensor& values, const Tensor&) const {
  if (values.numel() == 0) return Tensor::zeros({2});
  const Tensor v = values.dtype() == DType::kF32 ? values : values.to(DType::kF32);
  return total_and_count(sum(v), v.numel());
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

Tensor Accuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({2});
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must hold a value per value of y_pred ", y_pred.shape().str(),
                 " (Accuracy compares them value by value; class scores take \"accuracy\" or categorical_accuracy)");
  // Keras casts y_true to y_pred's dtype before comparing; float32 holds both after that.
  const Shape rows{n, y_pred.numel() / n};
  const Tensor p = y_pred.to(DType::kF32).reshape(rows);
  const Tensor t = y_true.to(y_pred.dtype()).to(DType::kF32).reshape(rows);
  return total_and_count(sum(mean(cast(equal(t, p), DType::kF32), -1)), n);
}

Tensor AccuracyByShape::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({2});
  const std::int64_t cols = y_pred.numel() / n;
  LOCKSTEP_CHECK(y_true.numel() == n || y_true.numel() == y_pred.numel(), "accuracy: y_true ", y_true.shape().str(),
                 " does not match y_pred ", y_pred.shape().str());
  if (cols == 1) {  // binary: threshold at 0.5
    const Tensor p = y_pred.to(DType::kF32).reshape({n});
    const Tensor t = y_true.to(DType::kF32).reshape({n});
    const Tensor matches = equal(cast(greater(p, Tensor::scalar(0.5)), DType::kF32), t);
    return total_and_count(sum(cast(matches, DType::kF32)), n);
  }
  // One-hot targets, or labels (as float32) against class scores.
  return accuracy_state(y_true.numel() == n ? y_true.reshape({n}) : y_true.reshape({n, cols}),
                        y_pred.reshape({n, cols}), /*labels_as_float=*/true);
}

Tensor MeanAbsoluteError::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return mean_error_state(name(), y_true, y_pred, [](const Tensor& diff) { return abs(diff); });
}

Tensor MeanSquaredError::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  return mean_error_state(name(), y_true, y_pred, [](const Tensor& diff) { return square(diff); });
}

Tensor CategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({2});
  const std::int64_t cols = y_pred.numel() / n;
  LOCKSTEP_CHECK(cols > 1 && y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must be one-hot rows like y_pred ", y_pred.shape().str(),
                 " (of 2 or more classes; integer labels take sparse_categorical_accuracy)");
  return accuracy_state(y_true.reshape({n, cols}), y_pred.reshape({n, cols}), /*labels_as_float=*/true);
}

BinaryAccuracy::BinaryAccuracy(std::string name, double threshold) : Metric(std::move(name)), threshold_(threshold) {
  LOCKSTEP_CHECK(std::isfinite(threshold), "BinaryAccuracy '", this->name(), "': threshold must be a finite number, got ",
                 threshold);
}

Tensor BinaryAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return Tensor::zeros({2});
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must hold a target per value of y_pred ", y_pred.shape().str());
  const Shape rows{n, y_pred.numel() / n};
  const Tensor predicted = cast(greater(y_pred.to(DType::kF32).reshape(rows), Tensor::scalar(threshold_)), DType::kF32);
  const Tensor matches = cast(equal(predicted, y_true.to(DType::kF32).reshape(rows)), DType::kF32);
  return total_and_count(sum(mean(matches, -1)), n);
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

Tensor in_top_k_state(const Tensor& target_rows, const Tensor& scores, std::int64_t k) {
  return total_and_count(sum(in_top_k(target_rows, scores, k)), scores.dim(0));
}
}  // namespace

TopKCategoricalAccuracy::TopKCategoricalAccuracy(std::int64_t k, std::string name)
    : Metric(std::move(name)), k_(checked_k(this->name(), k)) {}

Tensor TopKCategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const Shape rows = score_rows(name(), y_pred);
  LOCKSTEP_CHECK(y_true.numel() == y_pred.numel(), name(), ": y_true ", y_true.shape().str(),
                 " must be one-hot rows like y_pred ", y_pred.shape().str(),
                 " (integer labels take sparse_top_k_categorical_accuracy)");
  if (rows[0] == 0) return Tensor::zeros({2});
  const Tensor scores = y_pred.to(DType::kF32).reshape(rows);
  // Keras' target is the one-hot row's argmax (the first largest).
  const Tensor targets = one_hot(argmax(y_true.to(DType::kF32).reshape(rows)), rows[1]);
  return in_top_k_state(targets, scores, k_);
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(std::int64_t k, std::string name)
    : Metric(std::move(name)), k_(checked_k(this->name(), k)) {}

Tensor SparseTopKCategoricalAccuracy::batch_state(const Tensor& y_true, const Tensor& y_pred) const {
  const Shape rows = score_rows(name(), y_pred);
  LOCKSTEP_CHECK(y_true.numel() == rows[0], name(), ": y_true ", y_true.shape().str(),
                 " must hold one integer label per row of y_pred ", y_pred.shape().str(),
                 " (one-hot rows take top_k_categorical_accuracy)");
  LOCKSTEP_CHECK(!is_floating(y_true.dtype()), name(), ": labels must be integers, got ", dtype_name(y_true.dtype()));
  if (rows[0] == 0) return Tensor::zeros({2});
  return in_top_k_state(one_hot(y_true.reshape({rows[0]}), rows[1]), y_pred.to(DType::kF32).reshape(rows), k_);
}

}  // namespace lockstep::metrics
