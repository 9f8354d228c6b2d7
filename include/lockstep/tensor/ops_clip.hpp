#pragma once
// Gradient clipping by norm on the device (lockstep/core/clip_math.hpp): the optimizers' clipnorm
// and global_clipnorm, reading nothing back, so that a clipped step can be captured.
#include <cstdint>

#include "lockstep/core/clip_math.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// `count` squared norms in double, zeros, in this thread's device's memory (a float32 tensor of
/// 2 * count elements).
Tensor norm_sums(std::int64_t count);
/// sums[index] += sum_squares(x), bit for bit, by a kernel on x's device.
void add_sum_squares_(const Tensor& x, Tensor& sums, std::int64_t index);
/// scale_and_clip(g, clip_factor(c, sums[0], sums[own]), c.clipvalue), the factor derived on the
/// device: sums[0] is the global squared norm, sums[own] g's own.
Tensor clip_by_norms(const Tensor& g, const clip_math::NormClip& c, const Tensor& sums, std::int64_t own);

}  // namespace lockstep
