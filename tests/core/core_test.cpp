#include <gtest/gtest.h>

#include "lockstep/core/device.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/core/shape.hpp"

using namespace lockstep;

TEST(Shape, PrintsLikeKeras) {
  EXPECT_EQ((Shape{-1, 128}).str(), "(None, 128)");
  EXPECT_EQ((Shape{10}).str(), "(10,)");
  EXPECT_EQ((Shape{2, 3, 4}).numel(), 24);
  EXPECT_EQ((Shape{2, 3})[-1], 3);
  EXPECT_THROW((Shape{2, 3})[2], ValueError);
}

// (784, 2^62) once wrapped around to a small allocation size.
TEST(Shape, ElementCountOverflowIsAnError) {
  EXPECT_THROW((Shape{784, std::int64_t{1} << 62}).numel(), ValueError);
  EXPECT_EQ((Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}).numel(), std::int64_t{1} << 62);
  EXPECT_EQ((Shape{0, 28, 28}).tail().numel(), 784);
}

TEST(Device, ParsesAndRejects) {
  EXPECT_EQ(Device::parse("cpu:3").index, 3);
  EXPECT_EQ(Device::parse("GPU:1").kind, DeviceKind::kCuda);
  EXPECT_EQ(Device::parse("cpu").index, 0);
  EXPECT_THROW(Device::parse("tpu:0"), ValueError);
  EXPECT_THROW(Device::parse("cpu:x"), ValueError);
  EXPECT_THROW(Device::parse("cpu:-1"), ValueError);
}

// The dynamic loss scale's one rule (host and device): doubles after growth_steps finite steps in
// a row, halves on a step that was not finite and counts it skipped; never below 1, and no
// doubling past 1e30.
TEST(LossScaleMath, GrowsAfterFiniteStepsHalvesOnOthersWithinItsBounds) {
  using namespace loss_scale_math;
  LossScaleState s{.scale = 4};
  update(s, true, 2);
  EXPECT_EQ(s.scale, 4);
  EXPECT_EQ(s.counter, 1);
  update(s, true, 2);
  EXPECT_EQ(s.scale, 8);
  EXPECT_EQ(s.counter, 0);
  update(s, true, 2);
  update(s, false, 2);
  EXPECT_EQ(s.scale, 4);
  EXPECT_EQ(s.counter, 0);
  EXPECT_EQ(s.skipped, 1);
  LossScaleState low{.scale = 1.5};
  update(low, false, 2);
  EXPECT_EQ(low.scale, 1);
  update(low, false, 2);
  EXPECT_EQ(low.scale, 1);
  EXPECT_EQ(low.skipped, 2);
  LossScaleState high{.scale = 2e30};
  update(high, true, 1);
  EXPECT_EQ(high.scale, 2e30);
  EXPECT_EQ(high.counter, 0);
  // The step's factors, each rounded once to float32 from double.
  EXPECT_EQ(loss_factor(1.0 / 3.0, 1024.0), static_cast<float>(1024.0 / 3.0));
  EXPECT_EQ(unscale_factor(3.0), static_cast<float>(1.0 / 3.0));
}
