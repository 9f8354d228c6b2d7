#pragma once
#include <cstdint>
#include <string>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::layers {

/// Keras initializer names: "glorot_uniform", "glorot_normal", "he_normal", "he_uniform",
/// "uniform" (RandomUniform(-0.05, 0.05)), "orthogonal" (Orthogonal(gain=1.0), the recurrent
/// layers' recurrent kernels; a shape of rank 2 or more), "zeros", "ones". Fan-in/fan-out follow Keras for 2-D kernels (rows, cols).
struct Initializer {
  std::string name = "glorot_uniform";
  /// Fills a new float32 tensor deterministically from seed.
  Tensor operator()(const Shape& shape, std::uint64_t seed) const;
};

/// Mixes several words into one seed (SplitMix64); used to derive per-layer, per-weight seeds.
std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b);

}  // namespace lockstep::layers

namespace lockstep {
/// The seed that models built from now on derive their weights and dropout masks from
/// (as keras.utils.set_random_seed). Default 0. A model's own set_seed() overrides it.
void set_random_seed(std::uint64_t seed);
std::uint64_t random_seed();
}  // namespace lockstep
