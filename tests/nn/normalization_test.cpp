// BatchNormalization on one device: Keras' normalisation, moving-statistics update and
// inference behaviour, worked out from the batch by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/layers/normalization_layers.hpp"

namespace lockstep {
namespace {

using layers::CallContext;

// Two channels over 4 rows: channel 0 = 1, 2, 3, 6 (mean 3, variance 3.5); channel 1 = 0, 0, 4, 4
// (mean 2, variance 4).
Tensor batch() { return Tensor::from_vector<float>({1, 0, 2, 0, 3, 4, 6, 4}, {2, 2, 1, 2}); }

TEST(BatchNormalization, TrainingUsesBatchStatisticsAndMovesTheAveragesByKerasMomentum) {
  auto bn = layers::BatchNormalization();
  bn->build(Shape{-1, 2, 1, 2}, 0);
  auto* layer = dynamic_cast<layers::BatchNormalizationLayer*>(bn.get());
  ASSERT_NE(layer, nullptr);
  EXPECT_EQ(bn->count_params(), 8);
  EXPECT_EQ(bn->trainable_variables().size(), 2u);  // gamma, beta; the moving statistics are state
  const auto y = bn->call(batch(), CallContext{.training = true}).to_vector<float>();
  const double mean[] = {3, 2}, var[] = {3.5, 4};
  const auto x = batch().to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], (x[i] - mean[i % 2]) / std::sqrt(var[i % 2] + 1e-3), 1e-5) << i;
  // moving = moving * 0.99 + batch * 0.01 (Keras 3: the biased batch variance).
  const auto mm = layer->moving_mean().read_value().to_vector<float>();
  const auto mv = layer->moving_variance().read_value().to_vector<float>();
  EXPECT_NEAR(mm[0], 0.03, 1e-6);
  EXPECT_NEAR(mm[1], 0.02, 1e-6);
  EXPECT_NEAR(mv[0], 0.99 + 0.035, 1e-6);
  EXPECT_NEAR(mv[1], 0.99 + 0.04, 1e-6);
}

TEST(BatchNormalization, InferenceUsesTheMovingStatisticsAndLeavesThemAlone) {
  auto bn = layers::BatchNormalization({.momentum = 0.5f, .epsilon = 0.25f});
  bn->build(Shape{-1, 2}, 0);
  auto* layer = dynamic_cast<layers::BatchNormalizationLayer*>(bn.get());
  layer->moving_mean().assign(Tensor::from_vector<float>({1, -1}, {2}));
  layer->moving_variance().assign(Tensor::from_vector<float>({0.75f, 3.75f}, {2}));
  layer->gamma().assign(Tensor::from_vector<float>({2, 1}, {2}));
  layer->beta().assign(Tensor::from_vector<float>({0, 10}, {2}));
  // (x - mean) / sqrt(var + eps) * gamma + beta: (3 - 1) / 1 * 2 = 4; (1 + 1) / 2 + 10 = 11.
  const auto y = bn->call(Tensor::from_vector<float>({3, 1}, {1, 2}), CallContext{}).to_vector<float>();
  EXPECT_NEAR(y[0], 4.0f, 1e-6);
  EXPECT_NEAR(y[1], 11.0f, 1e-6);
  EXPECT_EQ(layer->moving_mean().read_value().to_vector<float>(), (std::vector<float>{1, -1}));
}

TEST(BatchNormalization, BadArgumentsAndInputsAreNamed) {
  EXPECT_NE(test::message_of([] { layers::BatchNormalization({.momentum = 1.5f}); }).find("momentum"),
            std::string::npos);
  EXPECT_NE(test::message_of([] { layers::BatchNormalization({.epsilon = 0}); }).find("epsilon"), std::string::npos);
  auto bn = layers::BatchNormalization();
  bn->build(Shape{-1, 3}, 0);
  EXPECT_NE(test::message_of([&] { bn->call(Tensor::ones({2, 4}), CallContext{}); }).find("expects 3 channels"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep
