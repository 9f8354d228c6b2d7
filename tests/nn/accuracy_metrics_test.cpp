// Keras 3's binary_accuracy, top_k_categorical_accuracy and sparse_top_k_categorical_accuracy on
// hand-made batches: the numbers Keras gives (its docs' examples, and TF's in_top_k on ties,
// NaN and k >= classes, checked against Keras 3.15.1), an empty batch, and every wrong shape a
// ValueError naming the metric.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {
using test::message_of;

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

Tensor mat(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) { return Tensor::from_vector(v, {rows, cols}); }
Tensor labels(const std::vector<std::int64_t>& v) { return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}); }
std::vector<float> state(const metrics::Metric& m, const Tensor& y_true, const Tensor& y_pred) {
  return m.batch_state(y_true, y_pred).to_vector<float>();
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
// Rows: the target tied with the top score; every score tied; the target second; a NaN elsewhere
// in the row (first, then third); an infinity that is the target's own score.
const std::vector<float> kTieScores{0.1f, 0.5f, 0.5f, 0.2f,  0.3f, 0.3f, 0.3f, 0.3f,  0.9f, 0.1f, 0.1f, 0.1f,
                                    kNaN, 0.1f, 0.2f, 0.3f,  0.1f, 0.2f, kNaN, 0.3f,  kInf, 0.1f, 0.1f, 0.1f};
const std::vector<std::int64_t> kTieLabels{2, 3, 1, 3, 3, 0};
// Matches Keras 3.15.1 gives these rows (ops.in_top_k, TF's InTopK), for k = 1 ... 5: a target tied
// with the k-th score is in the top k; a row holding a NaN or an infinity never is, even for k >=
// classes.
const std::vector<float> kKerasMatches{2, 3, 3, 3, 3};

TEST(TopKAccuracy, ATargetTiedWithTheKthScoreIsInAndARowWithANaNOrInfinityIsNot) {
  const Tensor scores = mat(kTieScores, 6, 4), ids = labels(kTieLabels), one_hot_rows = one_hot(ids, 4);
  for (std::int64_t k = 1; k <= 5; ++k) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const std::vector<float> want{kKerasMatches[k - 1], 6.0f};
    EXPECT_EQ(state(metrics::SparseTopKCategoricalAccuracy(k), ids, scores), want);
    EXPECT_EQ(state(metrics::TopKCategoricalAccuracy(k), one_hot_rows, scores), want);
    // float16 scores hold these values exactly: the same ties.
    EXPECT_EQ(state(metrics::SparseTopKCategoricalAccuracy(k), ids, scores.to(DType::kF16)), want);
  }
}

// keras.metrics.TopKCategoricalAccuracy's and SparseTopKCategoricalAccuracy's doc examples.
TEST(TopKAccuracy, KerasDocExamples) {
  const Tensor scores = mat({0.1f, 0.9f, 0.8f, 0.05f, 0.95f, 0.0f}, 2, 3);
  metrics::TopKCategoricalAccuracy top1(1);
  top1.update_state(mat({0, 0, 1, 0, 1, 0}, 2, 3), scores);
  EXPECT_DOUBLE_EQ(top1.result(), 0.5);
  metrics::SparseTopKCategoricalAccuracy sparse1(1);
  sparse1.update_state(labels({2, 1}), scores);
  EXPECT_DOUBLE_EQ(sparse1.result(), 0.5);
  metrics::SparseTopKCategoricalAccuracy sparse2(2);
  sparse2.update_state(labels({2, 1}), scores);
  EXPECT_DOUBLE_EQ(sparse2.result(), 1.0);
  // Batches add up: one more row, its label third of three -> 2 of 3.
  sparse2.update_state(labels({0}), mat({0.1f, 0.5f, 0.4f}, 1, 3));
  EXPECT_DOUBLE_EQ(sparse2.result(), 2.0 / 3.0);
  EXPECT_EQ(sparse2.clone_empty()->state(), (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(std::dynamic_pointer_cast<metrics::SparseTopKCategoricalAccuracy>(sparse2.clone_empty())->k(), 2);
}

// Keras' target of a row that is not one-hot is its argmax, the first largest.
TEST(TopKAccuracy, TheTargetOfARowThatIsNotOneHotIsItsFirstLargest) {
  // Targets 1 (of 0.7, 0.2, 0.1) and 0 (of a tie 0.5, 0.5): scores put class 1 first in both rows.
  metrics::TopKCategoricalAccuracy top1(1);
  top1.update_state(mat({0.1f, 0.7f, 0.2f, 0.5f, 0.5f, 0.0f}, 2, 3), mat({0.1f, 0.8f, 0.1f, 0.2f, 0.7f, 0.1f}, 2, 3));
  EXPECT_DOUBLE_EQ(top1.result(), 0.5);
}

// A label per position of rank-3 predictions (sequences), every position counted.
TEST(TopKAccuracy, RankThreePredictionsTakeALabelPerPosition) {
  const Tensor scores = mat(kTieScores, 6, 4);
  const std::vector<float> want{kKerasMatches[1], 6.0f};
  EXPECT_EQ(state(metrics::SparseTopKCategoricalAccuracy(2), labels(kTieLabels).reshape({2, 3}), scores.reshape({2, 3, 4})),
            want);
  EXPECT_EQ(state(metrics::TopKCategoricalAccuracy(2), one_hot(labels(kTieLabels), 4).reshape({2, 3, 4}),
                  scores.reshape({2, 3, 4})),
            want);
}

TEST(TopKAccuracy, AnEmptyBatchAddsNothing) {
  for (const metrics::MetricPtr& m : {metrics::deserialize("top_k_categorical_accuracy"),
                                      metrics::deserialize("sparse_top_k_categorical_accuracy"),
                                      metrics::deserialize("binary_accuracy")}) {
    const bool sparse = m->name() == "sparse_top_k_categorical_accuracy";
    const Tensor y = sparse ? Tensor::zeros({0}, DType::kI64) : Tensor::zeros({0, 4});
    EXPECT_EQ(state(*m, y, Tensor::zeros({0, 4})), (std::vector<float>{0.0f, 0.0f})) << m->name();
  }
}

TEST(TopKAccuracy, WrongShapesAndLabelsAreValueErrorsNamingTheMetric) {
  const Tensor scores = mat(kTieScores, 6, 4);
  metrics::TopKCategoricalAccuracy top(3, "top3");
  metrics::SparseTopKCategoricalAccuracy sparse(3);
  std::string m = message_of([&] { (void)top.batch_state(labels(kTieLabels), scores); });
  EXPECT_HAS(m, "top3: y_true (6,) must be one-hot rows like y_pred (6, 4)");
  EXPECT_HAS(m, "sparse_top_k_categorical_accuracy");
  m = message_of([&] { (void)sparse.batch_state(one_hot(labels(kTieLabels), 4), scores); });
  EXPECT_HAS(m, "sparse_top_k_categorical_accuracy: y_true (6, 4) must hold one integer label per row of y_pred (6, 4)");
  m = message_of([&] { (void)sparse.batch_state(labels(kTieLabels).to(DType::kF32), scores); });
  EXPECT_HAS(m, "sparse_top_k_categorical_accuracy: labels must be integers, got float32");
  m = message_of([&] { (void)sparse.batch_state(labels(kTieLabels), Tensor::zeros({6})); });
  EXPECT_HAS(m, "sparse_top_k_categorical_accuracy: y_pred (6,) must hold a score per class");
  // A label outside the classes is refused as the sparse loss refuses it (Keras counts a miss).
  m = message_of([&] { sparse.update_state(labels({0, 4, 1, 0, 0, 0}), scores); });
  EXPECT_HAS(m, "label 4 at index 1 is outside [0, 4)");
  EXPECT_EQ(sparse.state(), (std::vector<double>{0.0, 0.0}));
  m = message_of([] { metrics::TopKCategoricalAccuracy(0); });
  EXPECT_HAS(m, "top_k_categorical_accuracy: k must be a positive integer, got 0");
  m = message_of([] { metrics::SparseTopKCategoricalAccuracy(-2, "s"); });
  EXPECT_HAS(m, "s: k must be a positive integer, got -2");
}

// keras.metrics.BinaryAccuracy's doc example, and a threshold of 0.7.
TEST(BinaryAccuracy, KerasDocExamplesAndAThreshold) {
  metrics::BinaryAccuracy m;
  m.update_state(mat({1, 1, 0, 0}, 4, 1), mat({0.98f, 1.0f, 0.0f, 0.6f}, 4, 1));
  EXPECT_DOUBLE_EQ(m.result(), 0.75);
  metrics::BinaryAccuracy high("high", 0.7);
  high.update_state(labels({1, 0, 1}), mat({0.6f, 0.4f, 0.8f}, 3, 1));  // labels (n,) against (n, 1)
  EXPECT_DOUBLE_EQ(high.result(), 2.0 / 3.0);
  EXPECT_EQ(std::dynamic_pointer_cast<metrics::BinaryAccuracy>(high.clone_empty())->threshold(), 0.7);
  // Exactly at the threshold is 0 (Keras' y_pred > threshold).
  EXPECT_EQ(state(m, mat({0, 1}, 2, 1), mat({0.5f, 0.5f}, 2, 1)), (std::vector<float>{1.0f, 2.0f}));
}

// Several values per example (multi-label): each example's mean, and examples counted, as Keras'
// Mean over samples.
TEST(BinaryAccuracy, SeveralValuesPerExampleCountTheExamplesMean) {
  metrics::BinaryAccuracy m;
  // Row 0: both right; row 1: 0.5 is not above 0.5 (wrong), 0.7 is (right).
  EXPECT_EQ(state(m, mat({1, 0, 1, 1}, 2, 2), mat({0.6f, 0.4f, 0.5f, 0.7f}, 2, 2)), (std::vector<float>{1.5f, 2.0f}));
}

TEST(BinaryAccuracy, WrongShapesAndThresholdsAreValueErrorsNamingThem) {
  metrics::BinaryAccuracy m("bin");
  EXPECT_HAS(message_of([&] { (void)m.batch_state(mat({1, 0, 1}, 3, 1), mat({0.6f, 0.4f}, 2, 1)); }),
             "bin: y_true (3, 1) must hold a target per value of y_pred (2, 1)");
  EXPECT_HAS(message_of([] { metrics::BinaryAccuracy("b", std::nan("")); }),
             "BinaryAccuracy 'b': threshold must be a finite number, got nan");
  EXPECT_HAS(message_of([] { metrics::BinaryAccuracy("b", HUGE_VAL); }), "threshold must be a finite number, got inf");
}

}  // namespace
}  // namespace lockstep
