#include "lockstep/metrics/metric.hpp"

#include <cmath>

#include "lockstep/tensor/ops.hpp"

namespace lockstep::metrics {

void Mean::update_state(const Tensor& values, const Tensor&) {
  Tensor v = values.dtype() == DType::kF32 ? values : values.to(DType::kF32);
  const float* p = v.data<float>();
  for (std::int64_t i = 0, count = v.numel(); i < count; ++i) state_[0] += p[i];
  state_[1] += static_cast<double>(v.numel());
}

void SparseCategoricalAccuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  if (y_pred.dim(0) == 0) return;
  Tensor m = sparse_categorical_matches(y_true, y_pred);
  const float* p = m.data<float>();
  for (std::int64_t i = 0, count = m.numel(); i < count; ++i) state_[0] += p[i];
  state_[1] += static_cast<double>(m.numel());
}

void Accuracy::update_state(const Tensor& y_true, const Tensor& y_pred) {
  const std::int64_t n = y_pred.rank() ? y_pred.dim(0) : 1;
  if (n == 0) return;
  const std::int64_t cols = y_pred.numel() / n;
  LOCKSTEP_CHECK(y_true.numel() == n || y_true.numel() == y_pred.numel(), "accuracy: y_true ", y_true.shape().str(),
                 " does not match y_pred ", y_pred.shape().str());
  Tensor t = y_true.to(DType::kF32);
  const float* tp = t.data<float>();
  if (y_true.numel() == y_pred.numel() && cols > 1) {  // one-hot targets
    Tensor a = argmax(y_pred.reshape({n, cols}));
    Tensor b = argmax(t.reshape({n, cols}));
    for (std::int64_t i = 0; i < n; ++i) state_[0] += a.data<std::int64_t>()[i] == b.data<std::int64_t>()[i];
  } else if (cols == 1) {  // binary: threshold at 0.5
    const float* pp = y_pred.data<float>();
    for (std::int64_t i = 0; i < n; ++i) state_[0] += (pp[i] > 0.5f ? 1.0f : 0.0f) == tp[i];
  } else {  // integer labels against class scores
    Tensor a = argmax(y_pred.reshape({n, cols}));
    for (std::int64_t i = 0; i < n; ++i)
      state_[0] += static_cast<double>(a.data<std::int64_t>()[i]) == static_cast<double>(tp[i]);
  }
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
