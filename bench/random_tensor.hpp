#pragma once
// The benches' input data: a tensor of values uniform in [-1, 1) from a seed, the same each run.
#include <cstdint>
#include <random>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

inline lockstep::Tensor random_tensor(const lockstep::Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = u(rng);
  return lockstep::Tensor::from_vector(v, s);
}
