#pragma once
// Accuracy's batch state in one kernel (accuracy_state) against the ops it was composed of before
// (aaf2dcb: argmax, compare, cast, sum, and the count filled beside): ties (the first largest
// wins, Keras' rule), NaN rows (a NaN wins), labels as int64, int32, uint8 and float32 (one off
// the classes), one-hot targets with ties, 16-bit predictions, predictions of rank 3 and a batch
// of no rows, for sparse categorical accuracy and compile's "accuracy" picked by shapes
// (AccuracyByShape); on `device`. And keras.metrics.Accuracy, exact equality, on Keras' numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lockstep/metrics/metric.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::test {

// aaf2dcb's SparseCategoricalAccuracy::batch_state.
inline std::vector<float> composed_sparse_accuracy(const Tensor& y_true, const Tensor& y_pred) {
  if (y_pred.dim(0) == 0) return {0.0f, 0.0f};
  const std::int64_t classes = y_pred.rank() > 2 ? y_pred.dim(-1) : 0, positions = classes ? y_pred.numel() / classes : 0;
  const Tensor m = classes ? sparse_categorical_matches(y_true.reshape({positions}), y_pred.reshape({positions, classes}))
                           : sparse_categorical_matches(y_true, y_pred);
  return {sum(m).to_vector<float>()[0], static_cast<float>(m.numel())};
}

// aaf2dcb's Accuracy::batch_state, for class scores (cols > 1).
inline std::vector<float> composed_accuracy(const Tensor& y_true, const Tensor& y_pred) {
  const std::int64_t n = y_pred.dim(0);
  if (n == 0) return {0.0f, 0.0f};
  const std::int64_t cols = y_pred.numel() / n;
  const Tensor t = y_true.to(DType::kF32);
  const Tensor matches = y_true.numel() == y_pred.numel()
                             ? equal(argmax(y_pred.reshape({n, cols})), argmax(t.reshape({n, cols})))
                             : equal(cast(argmax(y_pred.reshape({n, cols})), DType::kF32), t.reshape({n}));
  return {sum(cast(matches, DType::kF32)).to_vector<float>()[0], static_cast<float>(n)};
}

inline void expect_accuracy_as_composed(const Device& device) {
  const float nan = NAN;
  // Rows: a tie of the first two (label on the first, then on the second), a clear winner, a NaN
  // after the largest, a NaN first, all NaN, a tie of three at the end.
  const std::vector<float> scores{0.4f, 0.4f, 0.2f, 0.0f,  0.4f, 0.4f, 0.2f, 0.0f,  0.1f, 0.2f, 0.9f, 0.3f,
                                  0.9f, 0.1f, nan,  0.2f,  nan,  0.5f, 0.7f, 0.1f,  nan,  nan,  nan,  nan,
                                  0.1f, 0.3f, 0.3f, 0.3f};
  const std::vector<std::int64_t> label_values{0, 1, 2, 2, 0, 0, 1};
  const auto on = [&](const Tensor& t) { return t.to(device); };
  const Tensor pred = on(Tensor::from_vector(scores, {7, 4}));
  const Tensor i64 = on(Tensor::from_vector(label_values, {7}));
  auto sparse = metrics::get("sparse_categorical_accuracy", "");
  const metrics::MetricPtr accuracy = std::make_shared<metrics::AccuracyByShape>();  // labels compared as floats
  const auto state = [](const metrics::MetricPtr& m, const Tensor& y, const Tensor& p) {
    return m->batch_state(y, p).to_vector<float>();
  };
  for (const DType labels : {DType::kI64, DType::kI32, DType::kU8}) {
    const Tensor y = i64.to(labels);
    EXPECT_EQ(state(sparse, y, pred), composed_sparse_accuracy(y, pred)) << dtype_name(labels);
    EXPECT_EQ(state(accuracy, y, pred), composed_accuracy(y, pred)) << dtype_name(labels) << " labels as floats";
  }
  EXPECT_EQ(state(sparse, i64, pred), (std::vector<float>{6.0f, 7.0f})) << "every row but the tie labelled second";
  const Tensor f32 = on(Tensor::from_vector(std::vector<float>{0, 1, 2, 2.5f, 0, nan, 1}, {7}));
  EXPECT_EQ(state(accuracy, f32, pred), composed_accuracy(f32, pred));
  for (const DType p : {DType::kF16, DType::kBF16}) {
    EXPECT_EQ(state(sparse, i64, pred.to(p)), composed_sparse_accuracy(i64, pred.to(p))) << dtype_name(p);
  }
  // One-hot targets, a tie among them too (the first wins, as argmax).
  const std::vector<float> one_hot{1, 0, 0, 0,  0, 1, 0, 0,  0, 0, 1, 0,  0, 0, 1, 0,  1, 1, 0, 0,  1, 0, 0, 0,
                                   0, 0, 0, 1};
  const Tensor targets = on(Tensor::from_vector(one_hot, {7, 4}));
  EXPECT_EQ(state(accuracy, targets, pred), composed_accuracy(targets, pred));
  // A label per position of rank-3 predictions; a short last slice of no rows.
  const Tensor seq = pred.slice(0, 6).reshape({2, 3, 4});
  const Tensor seq_labels = i64.slice(0, 6).reshape({2, 3});
  EXPECT_EQ(state(sparse, seq_labels, seq), composed_sparse_accuracy(seq_labels, seq));
  const Tensor none = pred.slice(0, 0), no_labels = i64.slice(0, 0);
  EXPECT_EQ(state(sparse, no_labels, none), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(state(accuracy, no_labels, none), (std::vector<float>{0.0f, 0.0f}));
}

// keras.metrics.Accuracy: how often y_pred equals y_true, value by value, as Keras 3.15.1 counts
// (its results on the same batches in the venv: 0.75 for its doc example, state [1.5, 3] for two
// values a row, 0.0 for scores against one-hot rows, 2/3 for labels against a column, 1.0 for
// float16 predictions against integers).
inline void expect_keras_accuracy(const Device& device) {
  const auto state = [&](const Tensor& y_true, const Tensor& y_pred) {
    return metrics::Accuracy().batch_state(y_true.to(device), y_pred.to(device)).to_vector<float>();
  };
  const auto f32 = [](std::vector<float> v, Shape s) { return Tensor::from_vector(v, std::move(s)); };
  const auto i64 = [](std::vector<std::int64_t> v, Shape s) { return Tensor::from_vector(v, std::move(s)); };
  EXPECT_EQ(state(i64({1, 2, 3, 4}, {4, 1}), f32({0, 2, 3, 4}, {4, 1})), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(state(i64({1, 2, 3, 4, 5, 6}, {3, 2}), f32({1, 0, 3, 4, 0, 0}, {3, 2})), (std::vector<float>{1.5f, 3.0f}));
  EXPECT_EQ(state(f32({0, 1, 1, 0}, {2, 2}), f32({0.1f, 0.9f, 0.8f, 0.2f}, {2, 2})), (std::vector<float>{0.0f, 2.0f}))
      << "scores are not rounded: \"accuracy\" would count both rows";
  const std::vector<float> column = state(i64({1, 0, 1}, {3}), f32({1, 0, 0.4f}, {3, 1}));
  EXPECT_EQ(column, (std::vector<float>{2.0f, 3.0f}));
  EXPECT_EQ(state(i64({1, 2}, {1, 2}), f32({1, 2}, {1, 2}).to(DType::kF16)), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(state(i64({}, {0}), f32({}, {0, 1})), (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace lockstep::test
