#pragma once
// Random test data that depends only on its arguments: float32 uniforms, and a classification
// problem (x uniform in [-1, 1) of shape (n, features), then int64 labels in [0, classes), drawn
// in that order from one mt19937_64 seeded with `seed`).
#include <cstdint>
#include <random>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::test {

/// float32 uniform in [lo, hi), drawn from an mt19937_64 seeded with `seed`.
inline Tensor random_uniform(const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (auto& e : v) e = u(rng);
  return Tensor::from_vector(v, shape);
}

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
