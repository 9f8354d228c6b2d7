#pragma once
// A random classification problem for training tests: x uniform in [-1, 1) of shape
// (n, features), then int64 labels in [0, classes), drawn in that order from one mt19937_64
// seeded with `seed` (so a test's data depends only on its arguments).
#include <cstdint>
#include <random>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::test {

struct Classification {
  Tensor x, y;
};

inline Classification random_classification(std::int64_t n, std::int64_t features, std::int64_t classes,
                                            std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xv(static_cast<std::size_t>(n * features));
  std::vector<std::int64_t> yv(static_cast<std::size_t>(n));
  for (auto& v : xv) v = u(rng);
  for (auto& v : yv) v = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(classes));
  return {Tensor::from_vector(xv, {n, features}), Tensor::from_vector(yv, {n})};
}

}  // namespace lockstep::test
