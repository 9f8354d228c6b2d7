#include <gtest/gtest.h>

#include "backend/context.hpp"
#include "lockstep/tensor/tensor.hpp"

using namespace lockstep;

TEST(Tensor, FromVectorRoundTripsAndViewsAlias) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.data<float>()[0], 3.0f);
  s.data<float>()[0] = 30.0f;
  EXPECT_EQ(t.data<float>()[2], 30.0f);  // a view writes through
  Tensor r = t.reshape({-1});
  EXPECT_EQ(r.shape(), (Shape{6}));
  Tensor c = t.clone();
  c.data<float>()[0] = -1;
  EXPECT_EQ(t.data<float>()[0], 1.0f);
}

TEST(Tensor, BadReshapeNamesShapes) {
  Tensor t = Tensor::zeros({3, 2});
  try {
    t.reshape({4, 2});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(3, 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(4, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.data<std::int32_t>(), ValueError);
  EXPECT_THROW(t.slice(2, 5), ValueError);
}

TEST(Tensor, DtypeConversion) {
  Tensor u = Tensor::from_vector<std::uint8_t>({0, 255, 7}, {3});
  Tensor f = u.to(DType::kF32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0, 255, 7}));
  EXPECT_FLOAT_EQ(Tensor::scalar(2.5f).item(), 2.5f);
}

TEST(Allocator, ReusesFreedBlocks) {
  backend::ComputeContext ctx(Device{}, 1);
  backend::ContextGuard guard(ctx);
  { Tensor a = Tensor::empty({1000}); }
  const auto before = ctx.allocator().stats().system_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor a = Tensor::empty({1000});
    Tensor b = Tensor::empty({900});  // same size class as a: served by a second cached block at most once
  }
  EXPECT_LE(ctx.allocator().stats().system_allocations, before + 1);
}
