// The train step seeds its loss gradient in one kernel (loss_seed) at the per-example losses: the
// weights come out bit-identical to differentiating the summed loss scaled by the step's factor
// (the way before, aaf2dcb), with and without a loss scale; and the seed is the bits of that
// derivative where a loss is infinite or NaN too (the factor: sum's derivative is 1 there, as TF's).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/summed_loss_steps.hpp"
#include "lockstep/tensor/ops_loss_scale.hpp"

namespace lockstep {
namespace {

TEST(LossSeed, TrainStepWeightsAreThoseOfTheSummedLossDifferentiated) {
  for (const bool loss_scaled : {false, true}) {
    EXPECT_EQ(test::weights_after_steps("cpu", loss_scaled, false, 5),
              test::weights_after_steps("cpu", loss_scaled, true, 5))
        << (loss_scaled ? "under a loss scale" : "no loss scale");
  }
}

// A model of two outputs seeds each output's per-example losses with its weight (one kernel each):
// the weights of the outputs' sums weighted, added and scaled, differentiated; a weight of 1 and
// another, with and without a loss scale.
TEST(LossSeed, TwoOutputsTrainStepWeightsAreThoseOfTheirWeightedSumDifferentiated) {
  for (const float reg_weight : {1.0f, 0.3f})
    for (const bool loss_scaled : {false, true}) {
      EXPECT_EQ(test::two_output_weights_after_steps("cpu", loss_scaled, false, reg_weight, 4),
                test::two_output_weights_after_steps("cpu", loss_scaled, true, reg_weight, 4))
          << "reg weight " << reg_weight << (loss_scaled ? ", under a loss scale" : ", no loss scale");
    }
}

TEST(LossSeed, IsTheDerivativeOfTheScaledSumWhereALossIsNotFinite) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const Tensor losses = Tensor::from_vector(std::vector<float>{0.5f, kInf, -0.0f, NAN, 3.0f, -kInf}, Shape{2, 3});
  const float factor = 0.125f;
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    tape.watch(losses);
    grads = tape.gradient(scale(sum(losses), factor), std::vector<Tensor>{losses});
  }
  const Tensor seed = loss_seed(losses, Tensor(), 0.0, factor);
  EXPECT_EQ(seed.shape(), losses.shape());
  EXPECT_TRUE(seed.bitwise_equal(grads[0])) << "seed " << seed.str() << ", derivative " << grads[0].str();
  // TF's: d/dx sum(x) is 1 at an infinite or NaN x too (before, x * 0 + g made the seed NaN there).
  EXPECT_EQ(seed.to_vector<float>(), std::vector<float>(6, factor));
}

// An output's weight in a model of several: the seed is the derivative of its sum scaled by the
// weight, then by the factor (f * weight rounded once, as scale's backward rounds it).
TEST(LossSeed, WithAWeightIsTheDerivativeOfTheWeightedSumScaled) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const Tensor losses = Tensor::from_vector(std::vector<float>{0.5f, kInf, -0.0f, NAN, 3.0f, -2.0f}, Shape{6});
  const float factor = 1.0f / 3.0f, weight = 0.3f;
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    tape.watch(losses);
    grads = tape.gradient(scale(scale(sum(losses), weight), factor), std::vector<Tensor>{losses});
  }
  const Tensor seed = loss_seed(losses, Tensor(), 0.0, factor, weight);
  EXPECT_TRUE(seed.bitwise_equal(grads[0])) << "seed " << seed.str() << ", derivative " << grads[0].str();
  EXPECT_EQ(seed.to_vector<float>()[0], factor * weight);
}

TEST(LossSeed, NamesWhatItCannotSeed) {
  EXPECT_THROW((void)loss_seed(Tensor(), Tensor(), 1.0, 1.0f), ValueError);
  try {
    (void)loss_seed(Tensor::ones({3}, DType::kF16), Tensor(), 1.0, 1.0f);
    FAIL() << "a float16 loss was seeded";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("loss_seed: the losses must be float32, got float16"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep
