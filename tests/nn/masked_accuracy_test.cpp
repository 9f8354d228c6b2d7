// Keras 3's accuracies on sequence outputs (b, steps, ...) under the output's mask (Metric::
// update_state with a mask: MeanMetricWrapper's apply_mask, then Mean's reduction to the weights'
// rank): exact Accuracy, compile's "accuracy" picked by shape, and top-k, on hand-made batches
// whose kept steps are counted by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {

// 2 examples of 3 steps; the mask keeps 4 of them.
Tensor mask() { return Tensor::from_vector<std::uint8_t>({1, 1, 0, 1, 0, 1}, Shape{2, 3}); }

double masked(metrics::Metric& m, const Tensor& y_true, const Tensor& y_pred) {
  m.reset_state();
  m.update_state(y_true, y_pred, Tensor(), mask());
  return m.result();
}

TEST(MaskedAccuracy, ExactAccuracyComparesEachKeptStep) {
  metrics::Accuracy accuracy;
  // Values per step (b, steps, 2): each step's mean over its last axis, weighed by the mask.
  const Tensor t3 = Tensor::from_vector<float>({1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}, Shape{2, 3, 2});
  const Tensor p3 = Tensor::from_vector<float>({1, 0, 2, 2, 0, 0, 4, 4, 0, 0, 0, 6}, Shape{2, 3, 2});
  // Kept steps' means: 0.5, 1, 1, 0.5.
  EXPECT_DOUBLE_EQ(masked(accuracy, t3, p3), 3.0 / 4);
  accuracy.reset_state();
  accuracy.update_state(t3, p3);
  EXPECT_DOUBLE_EQ(accuracy.result(), 3.0 / 6) << "unmasked: every step";
}

// An output of rank 2 (b, steps), as a layer that drops the features' axis gives it: each step is
// one comparison, which the mask or a weight per step weighs (Keras reduces the values to the
// weights' rank, reduction_metrics.py). Keras 3.15.1 gives each number below.
TEST(MaskedAccuracy, ExactAccuracyOnStepsOfRankTwoWeighsEachStepByTheMask) {
  metrics::Accuracy accuracy;
  const Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor p = Tensor::from_vector<float>({1, 0, 0, 4, 5, 6}, Shape{2, 3});  // equal: 1 0 0 / 1 1 1
  EXPECT_DOUBLE_EQ(masked(accuracy, t, p), 3.0 / 4) << "kept: 1 0 _ / 1 _ 1";
  accuracy.reset_state();
  accuracy.update_state(t, p);
  EXPECT_NEAR(accuracy.result(), 4.0 / 6, 1e-6) << "unmasked: every step (each example's mean in float32)";
  EXPECT_EQ(accuracy.state()[1], 2.0) << "Keras' state without weights: each example's mean, counted once";
  // One weight per example weighs each example's mean: (1 * 1/3 + 3 * 1) / 4.
  const Tensor per_example = Tensor::from_vector<float>({1, 3}, Shape{2, 1});
  accuracy.reset_state();
  accuracy.update_state(t, p, per_example);
  EXPECT_NEAR(accuracy.result(), 5.0 / 6, 1e-6);
  // With the mask: the kept steps' weights 1 1 _ / 3 _ 3, of which 1 + 3 + 3 count.
  accuracy.reset_state();
  accuracy.update_state(t, p, per_example, mask());
  EXPECT_DOUBLE_EQ(accuracy.result(), 7.0 / 8);
  // A weight per step: (1 + 1 + 1) / (1 + 2 + 1 + 1).
  accuracy.reset_state();
  accuracy.update_state(t, p, Tensor::from_vector<float>({1, 2, 0, 0, 1, 1}, Shape{2, 3}));
  EXPECT_DOUBLE_EQ(accuracy.result(), 3.0 / 5);
}

TEST(MaskedAccuracy, AccuracyByShapePicksByTheLastAxisAsKerasDoes) {
  // Class scores (2, 3, 3); the argmax per step is 0, 1, 2, 2, 1, 0.
  const Tensor scores = Tensor::from_vector<float>(
      {.8f, .1f, .1f, .1f, .8f, .1f, .1f, .1f, .8f, .1f, .1f, .8f, .1f, .8f, .1f, .8f, .1f, .1f}, Shape{2, 3, 3});
  // Labels per step (as any loss but a crossentropy gives them: floats): right at (0,0), (0,2),
  // (1,0); kept: (0,0) right, (0,1) wrong, (1,0) right, (1,2) wrong.
  const Tensor labels = Tensor::from_vector<float>({0, 2, 2, 2, 0, 1}, Shape{2, 3});
  metrics::AccuracyByShape by_shape;
  EXPECT_DOUBLE_EQ(masked(by_shape, labels, scores), 2.0 / 4);
  by_shape.reset_state();
  by_shape.update_state(labels, scores);
  EXPECT_DOUBLE_EQ(by_shape.result(), 3.0 / 6) << "each step's argmax, not the sequence's";
  // One-hot rows per step: the same matches.
  const Tensor one_hot_labels = one_hot(Tensor::from_vector<std::int64_t>({0, 2, 2, 2, 0, 1}, Shape{6}), 3).reshape(Shape{2, 3, 3});
  EXPECT_DOUBLE_EQ(masked(by_shape, one_hot_labels, scores), 2.0 / 4);
  // One output per step (b, steps, 1): a threshold at 0.5.
  const Tensor p1 = Tensor::from_vector<float>({.9f, .9f, .1f, .1f, .9f, .9f}, Shape{2, 3, 1});
  const Tensor t1 = Tensor::from_vector<float>({1, 0, 0, 0, 0, 0}, Shape{2, 3, 1});
  EXPECT_DOUBLE_EQ(masked(by_shape, t1, p1), 2.0 / 4);  // kept: right, wrong, right, wrong
  EXPECT_NE(test::message_of([&] { by_shape.update_state(labels.reshape(Shape{6}).slice(0, 4), scores); })
                .find("accuracy: y_true (4,) does not match y_pred (2, 3, 3)"),
            std::string::npos);
}

TEST(MaskedAccuracy, TopKCountsTheKeptSteps) {
  const Tensor scores = Tensor::from_vector<float>(
      {.8f, .1f, .1f, .1f, .8f, .1f, .1f, .1f, .8f, .1f, .1f, .8f, .1f, .8f, .1f, .8f, .1f, .1f}, Shape{2, 3, 3});
  const Tensor labels = Tensor::from_vector<std::int64_t>({0, 2, 2, 2, 0, 1}, Shape{2, 3});
  metrics::SparseTopKCategoricalAccuracy top1(1);
  EXPECT_DOUBLE_EQ(masked(top1, labels, scores), 2.0 / 4);
  metrics::TopKCategoricalAccuracy onehot_top1(1);
  const Tensor one_hot_labels = one_hot(labels.reshape(Shape{6}), 3).reshape(Shape{2, 3, 3});
  EXPECT_DOUBLE_EQ(masked(onehot_top1, one_hot_labels, scores), 2.0 / 4);
}

}  // namespace
}  // namespace lockstep
