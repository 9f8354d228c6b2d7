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

TEST(Device, ParsesAndRejects) {
  EXPECT_EQ(Device::parse("cpu:3").index, 3);
  EXPECT_EQ(Device::parse("GPU:1").kind, DeviceKind::kCuda);
  EXPECT_EQ(Device::parse("cpu").index, 0);
  EXPECT_THROW(Device::parse("tpu:0"), ValueError);
  EXPECT_THROW(Device::parse("cpu:x"), ValueError);
  EXPECT_THROW(Device::parse("cpu:-1"), ValueError);
}
