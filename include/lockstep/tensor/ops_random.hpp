#pragma once
// Normal noise keyed as dropout's masks are (DropoutKey): Keras' GaussianNoise and GaussianDropout.
#include "lockstep/tensor/ops.hpp"

namespace lockstep {

/// Standard normal noise of x's shape, dtype and device: unit (row r, column c) of x seen as
/// (rows, numel / rows) draws from the 64-bit hash the dropout kernel gives that unit
/// (backend/dropout_rng.hpp: its row keyed by first_example + r, its index in the global batch),
/// made normal by Box-Muller. So a batch split over replicas or threads draws what one device
/// draws, and every backend the same values. Drawn on the host (float32, then x's dtype) and copied
/// to x's device, keyed by the host's key.step: a capture check watching the call is told that a
/// replay would freeze the noise. Not recorded (a constant).
Tensor standard_normal_like(const Tensor& x, const DropoutKey& key);

}  // namespace lockstep
