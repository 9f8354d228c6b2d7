#include <gtest/gtest.h>

#include "lockstep/core/device.hpp"
#include "lockstep/core/error.hpp"
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
