#pragma once
// A Dense layer's ReLU backward and bias gradient in one op (relu_and_bias_grad) against the two
// ops it replaced in dense's backward: unary_grad's ReLU gradient, then sum over the rows; the
// same bits for every floating dtype, shapes that take each of reduce_sum's paths, infinities and
// NaN; one kernel. On `device`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_dense_grad.hpp"

namespace lockstep::test {

inline void expect_relu_bias_grad_as_composed(const Device& device) {
  for (const Shape& shape : {Shape{64, 128}, Shape{1000, 10}, Shape{7, 37}, Shape{5, 1}, Shape{0, 4}}) {
    const std::size_t n = static_cast<std::size_t>(shape.numel());
    std::vector<float> ys(n), gs(n);
    for (std::size_t i = 0; i < n; ++i) {
      ys[i] = i % 7 == 0 ? 0.0f : std::sin(static_cast<float>(i) * 0.9f);  // zeros: no gradient
      gs[i] = std::cos(static_cast<float>(i) * 1.3f) * 5.0f;
    }
    if (n > 40) {
      ys[20] = NAN;       // not > 0: no gradient
      gs[33] = INFINITY;  // kept where y > 0
      gs[40] = NAN;
    }
    for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Tensor y = Tensor::from_vector(ys, shape).to(dtype).to(device);
      const Tensor g = Tensor::from_vector(gs, shape).to(dtype).to(device);
      const std::string at = shape.str() + " " + dtype_name(dtype);
      const Tensor dx_composed = unary_grad(OpType::kRelu, y, y, g);
      const Tensor db_composed = sum(dx_composed, 0);
      const auto launches = [&device] {
        return std::vector<std::uint64_t>{
            detail::kernel_launches(device, "relu_backward_bias_grad"),
            detail::kernel_launches(device, "unary_backward") + detail::kernel_launches(device, "reduce_sum")};
      };
      const std::vector<std::uint64_t> before = launches();
      Tensor db;
      const Tensor dx = relu_and_bias_grad(y, g, db);
      EXPECT_EQ(launches()[0] - before[0], 1u) << "one kernel " << at;
      EXPECT_EQ(launches()[1], before[1]) << at;
      EXPECT_TRUE(dx.bitwise_equal(dx_composed)) << "dx " << at;
      EXPECT_TRUE(db.bitwise_equal(db_composed)) << "db " << at;
    }
  }
  Tensor db;
  EXPECT_THROW((void)relu_and_bias_grad(Tensor::ones({2, 3}).to(device), Tensor::ones({3, 2}).to(device), db),
               ValueError);
}

}  // namespace lockstep::test
