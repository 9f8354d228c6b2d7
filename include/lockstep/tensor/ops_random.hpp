#pragma once
// Random draws keyed as dropout's masks are (DropoutKey): Keras' GaussianNoise and GaussianDropout
// (standard normal noise), RandomContrast and RandomBrightness (uniform factors).
#include "lockstep/tensor/ops.hpp"

namespace lockstep {

/// Standard normal noise of x's shape, dtype and device: unit (row r, column c) of x seen as
/// (rows, numel / rows) draws from the 64-bit hash the dropout kernel gives that unit
/// (backend/dropout_rng.hpp: its row keyed by first_example + r, its index in the global batch),
/// made normal by Box-Muller in float32 (then x's dtype). So a batch split over replicas or
/// threads draws what one device draws, and every backend the same values (a GPU's may differ
/// from the CPU's by one float32 ulp, rarely: dropout_rng.hpp's standard_normal). Drawn by the
/// random_fill kernel on x's device, keyed by the count of key.step_block where it is defined
/// (read on the device, so a captured step replays with each step's noise), else by key.step,
/// which a capture check watching the call is told a replay would freeze. Only x's shape,
/// dtype and device are read. Not recorded (a constant).
Tensor standard_normal_like(const Tensor& x, const DropoutKey& key);

/// Uniform draws in [0, 1) of x's shape, dtype and device, keyed and drawn as
/// standard_normal_like's: the 24 bits of a unit's hash that dropout compares with its rate,
/// times 2^-24, so the same bits on every backend.
Tensor uniform_like(const Tensor& x, const DropoutKey& key);

/// The draws of standard_normal_like and uniform_like for a tensor of `shape` and `dtype`
/// (floating), drawn where every op's output lies, on the current compute context's device (as
/// the _like forms draw for x, which must live there): for draws of a shape no tensor at hand has
/// (RandomContrast's one per image), without making one to copy it from. Keras'
/// random.normal(shape, dtype=) and random.uniform(shape, dtype=).
Tensor standard_normal(const Shape& shape, DType dtype, const DropoutKey& key);
Tensor uniform(const Shape& shape, DType dtype, const DropoutKey& key);

}  // namespace lockstep
