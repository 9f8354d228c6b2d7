#pragma once
// Small helpers shared by the training tests: a linearly separable toy problem and error text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::test {

/// n points in [-1, 1]^2 with label (x0 + x1 > 0), at least `margin` away from the boundary.
struct Toy {
  Tensor x;  // (n, 2) float32
  Tensor y;  // (n,) int64
};
inline Toy make_toy(std::int64_t n, double margin = 0.2, std::uint64_t seed = 1) {
  std::vector<float> xs;
  std::vector<std::int64_t> ys;
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  auto uniform = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) / static_cast<double>(1ULL << 53) * 2.0 - 1.0;
  };
  while (static_cast<std::int64_t>(ys.size()) < n) {
    const double a = uniform(), b = uniform();
    if (std::abs(a + b) < margin) continue;
    xs.push_back(static_cast<float>(a));
    xs.push_back(static_cast<float>(b));
    ys.push_back(a + b > 0 ? 1 : 0);
  }
  return {Tensor::from_vector(xs, Shape{n, 2}), Tensor::from_vector(ys, Shape{n})};
}

using test::message_of;  // tests/common/error_message.hpp

}  // namespace lockstep::test
