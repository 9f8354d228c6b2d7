#pragma once
// Dropout's mask and product in one kernel against the way before (aaf2dcb: the mask from the
// counter-based generator, then binary's multiply): the same output bits, infinities and NaN
// on dropped units included, and the same gradient, for every floating dtype; rate 0 runs no
// kernel. On `device`.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/dropout_rng.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::test {

// The mask the old kernel stored: 1 / (1 - rate) or 0, rounded once to `dtype`.
inline Tensor composed_dropout_mask(const Shape& shape, DType dtype, float rate, const DropoutKey& key) {
  namespace rng = backend::dropout;
  const std::int64_t rows = shape.rank() ? shape[0] : 1, cols = rows ? shape.numel() / rows : 0;
  const std::uint64_t step_key = rng::step_key(key.seed, key.stream, key.step);
  std::vector<float> mask(static_cast<std::size_t>(shape.numel()));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      mask[static_cast<std::size_t>(r * cols + c)] =
          rng::dropped(rng::row_key(step_key, key.first_example + r), c, rng::threshold(rate)) ? 0.0f
                                                                                               : 1.0f / (1.0f - rate);
  return Tensor::from_vector(mask, shape).to(dtype);
}

inline void expect_dropout_as_composed(const Device& device) {
  const DropoutKey key{.seed = 5, .stream = 3, .step = 11, .first_example = 40};
  const Shape shape{37, 29};
  std::vector<float> xs(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(static_cast<float>(i)) * 3.0f;
  xs[3] = INFINITY;  // some of these are dropped: inf * 0 is NaN, as before
  xs[100] = -INFINITY;
  xs[200] = NAN;
  for (std::size_t i = 400; i < 460; ++i) xs[i] = INFINITY;
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const float rate : {0.2f, 0.5f}) {
      const Tensor x = Tensor::from_vector(xs, shape).to(dtype).to(device);
      const Tensor g = Tensor::from_vector(xs, shape).to(dtype).to(device);
      const Tensor mask = composed_dropout_mask(shape, dtype, rate, key).to(device);
      Tensor y;
      std::vector<Tensor> dx;
      {
        GradientTape tape;
        tape.watch(x);
        y = dropout(x, rate, key);
        dx = tape.gradient(y, std::vector<Tensor>{x}, g);
      }
      EXPECT_TRUE(y.bitwise_equal(mul(x, mask))) << dtype_name(dtype) << " rate " << rate;
      EXPECT_TRUE(dx[0].bitwise_equal(mul(g, mask))) << dtype_name(dtype) << " rate " << rate;
      const std::uint64_t launches = detail::kernel_launches(device);
      EXPECT_TRUE(dropout(x, rate, key).bitwise_equal(y)) << "untaped, " << dtype_name(dtype);
      EXPECT_EQ(detail::kernel_launches(device) - launches, 1u) << "the mask and the product: one kernel";
    }
  }
  const Tensor x = Tensor::from_vector(xs, shape).to(device);
  const std::uint64_t before = detail::kernel_launches(device);
  const Tensor same = dropout(x, 0.0f, key);
  EXPECT_EQ(detail::kernel_launches(device), before) << "rate 0 runs no kernel";
  EXPECT_TRUE(same.bitwise_equal(x));
}

}  // namespace lockstep::test
