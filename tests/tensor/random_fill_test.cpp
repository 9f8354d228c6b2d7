// The random_fill kernel behind standard_normal(_like) and uniform(_like) (ops_random.hpp): the values
// are the dropout keying's unit hash made uniform or normal by the rule written out here (the
// normal one bit for bit what the host drew before the kernel), 16-bit dtypes the float32 draw
// rounded once, the uniform's bits the ones dropout compares with its rate, and the step read from
// a step block (so a capture check sees nothing) or from the host (named to a capture check).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "backend/dropout_rng.hpp"
#include "common/error_message.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_random.hpp"
#include "lockstep/tensor/step_capture.hpp"

namespace lockstep {
namespace {

const DropoutKey kKey{.seed = 3, .stream = 9, .step = 12, .first_example = 40};

// The unit hash of (row r, column c) under kKey, from dropout_rng.hpp's cascade.
std::uint64_t unit_hash(std::int64_t r, std::int64_t c) {
  namespace rng = backend::dropout;
  const std::uint64_t step = rng::step_key(kKey.seed, kKey.stream, kKey.step);
  return rng::mix(rng::row_key(step, kKey.first_example + r) + static_cast<std::uint64_t>(c));
}

TEST(RandomFill, StandardNormalIsBoxMullerOnEachUnitsHashBitForBit) {
  const Tensor x = Tensor::zeros({7, 3, 5});
  const auto z = standard_normal_like(x, kKey).to_vector<float>();
  ASSERT_EQ(z.size(), 105u);
  for (std::int64_t r = 0; r < 7; ++r)
    for (std::int64_t c = 0; c < 15; ++c) {
      const std::uint64_t h = unit_hash(r, c);
      const double u1 = (static_cast<double>(h >> 32) + 0.5) / 4294967296.0;
      const double u2 = static_cast<double>(h & 0xffffffffULL) / 4294967296.0;
      const float want =
          static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
      ASSERT_EQ(z[static_cast<std::size_t>(r * 15 + c)], want) << "row " << r << " column " << c;
    }
}

TEST(RandomFill, UniformIsTheTopTwentyFourBitsDropoutComparesWithItsRate) {
  const Tensor x = Tensor::zeros({64, 50});
  const auto u = uniform_like(x, kKey).to_vector<float>();
  for (std::int64_t r = 0; r < 64; ++r)
    for (std::int64_t c = 0; c < 50; ++c)
      ASSERT_EQ(u[static_cast<std::size_t>(r * 50 + c)], static_cast<float>(unit_hash(r, c) >> 40) / 16777216.0f);
  // Dropout with rate 1/4 drops exactly the units whose uniform draw is below 1/4.
  const auto kept = dropout(Tensor::ones({64, 50}), 0.25f, kKey).to_vector<float>();
  for (std::size_t i = 0; i < u.size(); ++i) ASSERT_EQ(kept[i] == 0.0f, u[i] < 0.25f) << i;
  // Uniform on [0, 1): mean 1/2, variance 1/12, within 5 standard errors over 3200 draws.
  double mean = 0, var = 0;
  for (float v : u) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    mean += v;
  }
  mean /= static_cast<double>(u.size());
  for (float v : u) var += (v - mean) * (v - mean);
  var /= static_cast<double>(u.size());
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / 3200));
  EXPECT_NEAR(var, 1.0 / 12, 0.006);
}

TEST(RandomFill, SixteenBitDrawsAreTheFloat32DrawsRoundedOnce) {
  for (const DType dt : {DType::kF16, DType::kBF16}) {
    const Tensor x = Tensor::zeros({9, 31}).to(dt);
    EXPECT_TRUE(standard_normal_like(x, kKey).bitwise_equal(standard_normal_like(x.to(DType::kF32), kKey).to(dt)))
        << dtype_name(dt);
    EXPECT_TRUE(uniform_like(x, kKey).bitwise_equal(uniform_like(x.to(DType::kF32), kKey).to(dt))) << dtype_name(dt);
    EXPECT_EQ(uniform_like(x, kKey).dtype(), dt);
  }
}

// uniform and standard_normal draw for a shape and dtype what the _like forms draw for a tensor of
// them (RandomContrast's one draw per image takes no tensor to copy them from).
TEST(RandomFill, ADrawForAShapeAndDtypeIsTheDrawForATensorOfThem) {
  for (const DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor x = Tensor::zeros({6, 1}).to(dt);
    EXPECT_TRUE(uniform(Shape{6, 1}, dt, kKey).bitwise_equal(uniform_like(x, kKey))) << dtype_name(dt);
    EXPECT_TRUE(standard_normal(Shape{6, 1}, dt, kKey).bitwise_equal(standard_normal_like(x, kKey))) << dtype_name(dt);
  }
  EXPECT_EQ(uniform(Shape{0, 1}, DType::kF32, kKey).shape(), (Shape{0, 1}));
  EXPECT_VALUE_ERROR(uniform(Shape{2, 1}, DType::kI64, kKey), "uniform: draws float32, float16 or bfloat16 values, not int64");
}

TEST(RandomFill, ASplitBatchDrawsTheWholeOnesAndStepsDrawApart) {
  const Tensor x = Tensor::zeros({10, 4});
  const auto whole = standard_normal_like(x, kKey).to_vector<float>();
  DropoutKey second = kKey;
  second.first_example += 6;
  auto joined = standard_normal_like(x.slice(0, 6), kKey).to_vector<float>();
  const auto rest = standard_normal_like(x.slice(6, 10), second).to_vector<float>();
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, whole);
  DropoutKey next = kKey;
  next.step += 1;
  EXPECT_NE(standard_normal_like(x, next).to_vector<float>(), whole);
  DropoutKey other = kKey;
  other.stream += 1;
  EXPECT_NE(uniform_like(x, other).to_vector<float>(), uniform_like(x, kKey).to_vector<float>());
}

TEST(RandomFill, AStepBlockKeysTheDrawsOnTheDeviceAndAHostStepIsNamedToACaptureCheck) {
  const Tensor x = Tensor::zeros({5, 6});
  Tensor block = step_block();
  set_step_count_(block, kKey.step);
  DropoutKey on_device = kKey;
  on_device.step = 0;
  on_device.step_block = block;
  EXPECT_TRUE(standard_normal_like(x, on_device).bitwise_equal(standard_normal_like(x, kKey)));
  EXPECT_TRUE(uniform_like(x, on_device).bitwise_equal(uniform_like(x, kKey)));
  StepCaptureCheck on_device_check, on_host_check;
  {
    const StepCaptureCheck::OnThisThread watched(&on_device_check);
    (void)standard_normal_like(x, on_device);
    (void)uniform_like(x, on_device);
  }
  EXPECT_EQ(on_device_check.blocker(), "");
  {
    const StepCaptureCheck::OnThisThread watched(&on_host_check);
    (void)uniform_like(x, kKey);
  }
  EXPECT_EQ(on_host_check.blocker(),
            "the op 'uniform_like' (kernel random_fill) takes the step that keys dropout as a host value, which a "
            "replay would freeze");
  set_step_count_(block, kKey.step + 1);
  EXPECT_FALSE(standard_normal_like(x, on_device).bitwise_equal(standard_normal_like(x, kKey)));
  EXPECT_VALUE_ERROR(uniform_like(x, {.step_block = Tensor::zeros({3})}),
                     "uniform_like: the step block must be a float32 tensor of");
}

}  // namespace
}  // namespace lockstep
