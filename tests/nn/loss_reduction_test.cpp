// Keras 3's apply_mask and reduce_weighted_values (lockstep/losses/reduction.hpp) on numbers small
// enough to check by hand: what a custom loop's loss and a metric's weights are under sample
// weights and an output's mask.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/losses/reduction.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {

using losses::Reduction;

// Losses of 2 examples of 3 steps, and a mask keeping 4 of the 6 steps.
Tensor values() { return Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}); }
Tensor mask() { return Tensor::from_vector<std::uint8_t>({1, 1, 0, 1, 0, 1}, Shape{2, 3}); }

float reduced(const Tensor& w, const Tensor& m, Reduction r) {
  return losses::reduce_weighted_values(values(), w, m, r).item();
}

TEST(LossReduction, TheMaskMakesTheDefaultTheMeanOverTheKeptSteps) {
  EXPECT_FLOAT_EQ(reduced(Tensor(), Tensor(), Reduction::kSumOverBatchSize), 21.0f / 6);
  EXPECT_FLOAT_EQ(reduced(Tensor(), mask(), Reduction::kSumOverBatchSize), (1 + 2 + 4 + 6) / 4.0f);
  EXPECT_FLOAT_EQ(reduced(Tensor(), mask(), Reduction::kSum), 13.0f);
  EXPECT_EQ(losses::reduce_weighted_values(values(), Tensor(), mask(), Reduction::kNone).to_vector<float>(),
            (std::vector<float>{1, 2, 0, 4, 0, 6}));
  // Nothing kept: 0, not a NaN (Keras' divide_no_nan).
  EXPECT_EQ(reduced(Tensor(), Tensor::zeros(Shape{2, 3}, DType::kU8), Reduction::kSumOverBatchSize), 0.0f);
}

TEST(LossReduction, SampleWeightsPerExamplePerStepOrScalarWeighTheValues) {
  const Tensor per_example = Tensor::from_vector<float>({2, 0.5f}, Shape{2});
  // Keras divides by the number of values, not by the weights' sum; with a mask by the kept ones.
  EXPECT_FLOAT_EQ(reduced(per_example, Tensor(), Reduction::kSumOverBatchSize), (2 * 6 + 0.5f * 15) / 6);
  EXPECT_FLOAT_EQ(reduced(per_example.reshape(Shape{2, 1}), Tensor(), Reduction::kSum), 2 * 6 + 0.5f * 15);
  EXPECT_FLOAT_EQ(reduced(per_example, mask(), Reduction::kSumOverBatchSize), (2 * 3 + 0.5f * 10) / 4);
  const Tensor per_step = Tensor::from_vector<float>({1, 0, 1, 2, 2, 2}, Shape{2, 3});
  EXPECT_FLOAT_EQ(reduced(per_step, mask(), Reduction::kSum), 1 + 8 + 12);
  EXPECT_FLOAT_EQ(reduced(Tensor::scalar(3.0f), Tensor(), Reduction::kSum), 63.0f);
}

TEST(LossReduction, WeightsOrAMaskOfAnotherShapeAreValueErrorsNamingThem) {
  const std::string w = test::message_of([] { reduced(Tensor::ones(Shape{2, 2}), Tensor(), Reduction::kSum); });
  EXPECT_NE(w.find("sample_weight: a batch of 2 examples needs one weight per example (shape (2,) or (2, 1)) or one "
                   "per position of the loss (2, 3) (shape (2, 3)), got shape (2, 2)"),
            std::string::npos)
      << w;
  EXPECT_NE(test::message_of([] { reduced(Tensor::ones(Shape{3}), Tensor(), Reduction::kSum); }).find("got shape (3,)"),
            std::string::npos);
  const std::string m = test::message_of([] { reduced(Tensor(), Tensor::ones(Shape{2, 2}, DType::kU8), Reduction::kSum); });
  EXPECT_NE(m.find("the output's mask (2, 2) does not mark the positions of the loss (2, 3)"), std::string::npos) << m;
  EXPECT_THROW(losses::reduction_from_name("mean_with_sample_weight"), ValueError);
  EXPECT_EQ(losses::reduction_from_name("auto"), Reduction::kSumOverBatchSize);
}

TEST(LossReduction, TheGradientReachesOnlyTheKeptSteps) {
  Variable v(values());
  GradientTape tape;
  const Tensor l = losses::reduce_weighted_values(v.value(), Tensor(), mask(), Reduction::kSumOverBatchSize);
  const std::vector<Tensor> g = tape.gradient(l, std::vector<Variable>{v});
  EXPECT_EQ(g.at(0).to_vector<float>(), (std::vector<float>{0.25f, 0.25f, 0, 0.25f, 0, 0.25f}));
}

TEST(LossReduction, AMetricsWeightsAreTheMasksOnesAndZerosTimesItsSampleWeights) {
  // Keras' MeanMetricWrapper: apply_mask with the "sum" reduction.
  EXPECT_EQ(metrics::mask_weights(Tensor(), mask()).to_vector<float>(), (std::vector<float>{1, 1, 0, 1, 0, 1}));
  const Tensor per_example = Tensor::from_vector<float>({2, 0.5f}, Shape{2});
  EXPECT_EQ(metrics::mask_weights(per_example, mask()).to_vector<float>(),
            (std::vector<float>{2, 2, 0, 0.5f, 0, 0.5f}));
  EXPECT_FALSE(metrics::mask_weights(Tensor(), Tensor()).defined());
  // A metric that applies masks weighs by them; a mean of the user's values does not.
  metrics::Mean mean;
  mean.update_state(values(), Tensor(), Tensor(), mask());
  EXPECT_FLOAT_EQ(mean.result(), 21.0 / 6);
}

}  // namespace
}  // namespace lockstep
