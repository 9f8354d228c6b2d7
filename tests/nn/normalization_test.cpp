// BatchNormalization on one device: Keras' normalisation, moving-statistics update and
// inference behaviour, worked out from the batch by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/tensor/compute_context.hpp"

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

// As Keras 3: a 16-bit input is normalised in float32 and the output cast back, in training (the
// batch's statistics) and inference; the gradient reaches the 16-bit input. Before, the layer
// mixed the input's dtype with its float32 variables and raised.
TEST(BatchNormalization, SixteenBitInputsAreNormalisedInFloat32AndCastBack) {
  for (const bool training : {true, false}) {
    for (const DType dtype : {DType::kBF16, DType::kF16}) {
      auto bn16 = layers::BatchNormalization(), bn32 = layers::BatchNormalization();
      bn16->build(Shape{-1, 2, 1, 2}, 0);
      bn32->build(Shape{-1, 2, 1, 2}, 0);
      const Tensor x16 = batch().to(dtype);
      const Tensor y16 = bn16->call(x16, CallContext{.training = training});
      EXPECT_EQ(y16.dtype(), dtype);
      const Tensor want = bn32->call(x16.to(DType::kF32), CallContext{.training = training}).to(dtype);
      EXPECT_TRUE(y16.bitwise_equal(want)) << dtype_name(dtype) << (training ? " training" : " inference");
      GradientTape tape;
      tape.watch(x16);
      const Tensor y = cast(bn16->call(x16, CallContext{.training = training}), DType::kF32);
      const Tensor loss = sum(mul(y, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 1, 2})));
      const Tensor g = tape.gradient(loss, std::vector<Tensor>{x16})[0];
      ASSERT_TRUE(g.defined());
      EXPECT_EQ(g.dtype(), dtype);
    }
  }
}

// What a 16-bit BatchNormalization leaves on a tape for the backward pass is its 16-bit input and
// output: the float32 normalisation happens in temporaries (a float32 copy of the input and of
// the output on the tape would make a mixed-precision convnet hold more than a float32 one).
TEST(BatchNormalization, SixteenBitTrainingKeepsNoFloat32CopiesOnTheTape) {
  auto bn = layers::BatchNormalization();
  bn->build(Shape{-1, 16, 16, 32}, 0);
  const Tensor x = Tensor::full({8, 16, 16, 32}, 0.5f).to(DType::kBF16);
  auto& ctx = current_compute_context();
  GradientTape tape;
  tape.watch(x);
  const std::uint64_t before = context_bytes_in_use(ctx);
  const Tensor y = bn->call(x, CallContext{.training = true});
  EXPECT_EQ(y.dtype(), DType::kBF16);
  const std::uint64_t held = context_bytes_in_use(ctx) - before;
  EXPECT_LT(held, 2 * x.nbytes()) << "the tape holds " << held << " bytes for a " << x.nbytes() << "-byte input";
}

// The fused ops have no gradient of their own: on inputs a tape records they raise rather than
// hand back a result the tape would silently not differentiate.
TEST(BatchNormalization, FusedOpsRefuseInputsATapeRecords) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor c = Tensor::from_vector<float>({0.5f, 1}, {2});
  EXPECT_EQ(batch_norm_apply(x, c, c, c).to_vector<float>(), (std::vector<float>{0.75f, 2, 1.75f, 4}));
  GradientTape tape;
  tape.watch(x);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { (void)batch_norm_apply(x, c, c, Tensor()); },
           [&] { (void)batch_norm_squared_deviations(x, c); },
           [&] { (void)batch_norm_grad_sums(x, x, c, c); },
           [&] { (void)batch_norm_input_grad(x, x, c, c, c, c, c); }}) {
    const std::string m = test::message_of(call);
    EXPECT_NE(m.find("has no gradient of its own"), std::string::npos) << m;
    EXPECT_NE(m.find("record_custom"), std::string::npos) << m;
  }
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
