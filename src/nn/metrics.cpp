#include "lockstep/metrics/metric.hpp"

#include "lockstep/tensor/ops.hpp"

namespace lockstep::metrics {

// Each update reduces on the device and brings back only the batch's total.
void Mean::update_state(const Tensor& values, const Tensor&) {
  if (values.numel() == 0) return;
  const Tensor v = is_floating(values.dtype()) ? values : values.to(DType::kF32);
  state_[0] += static_cast<double>(sum(v).item());
  state_[1] += static_cast<double>(v.numel());
}

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  if (y_pred.dim(0) == 0) return;
  const Tensor m = sparse_categorical_matches(y_true, y_pred);
  state_[0] += static_cast<double>(sum(m).item());
  state_[1] += static_cast<double>(m.numel());
}

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return;
  const std::int64_t cols = y_pred.numel() / n;
  LOCKSTEP_CHECK(y_true.numel() == n || y_true.numel() == y_pred.numel(), "accuracy: y_true ", y_true.shape().str(),
                 " does not match y_pred ", y_pred.shape().str());
  const Tensor t = y_true.to(DType::kF32);
  Tensor matches;
  if (y_true.numel() == y_pred.numel() && cols > 1) {  // one-hot targets
    matches = equal(argmax(y_pred.reshape({n, cols})), argmax(t.reshape({n, cols})));
  } else if (cols == 1) {  // binary: threshold at 0.5
    const Tensor p = y_pred.to(DType::kF32).reshape({n});
    matches = equal(cast(greater(p, Tensor::scalar(0.5)), DType::kF32), t.reshape({n}));
  } else {  // integer labels against class scores
    matches = equal(cast(argmax(y_pred.reshape({n, cols})), DType::kF32), t.reshape({n}));
  }
  state_[0] += static_cast<double>(sum(cast(matches, DType::kF32)).item());
  state_[1] += static_cast<double>(n);
}

MetricPtr get(const std::string& name, const std::string& loss_name) {
  if (name == "accuracy" || name == "acc") {
    if (loss_name == "sparse_categorical_crossentropy") return std::make_shared<SparseCategoricalAccuracy>(name);
    return std::make_shared<Accuracy>(name);
  }
  if (name == "sparse_categorical_accuracy") return std::make_shared<SparseCategoricalAccuracy>();
  if (name == "mean") return std::make_shared<Mean>();
  throw ValueError("unknown metric '" + name + "': expected accuracy, sparse_categorical_accuracy or mean");
}

}  // namespace lockstep::metrics
