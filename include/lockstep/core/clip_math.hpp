#pragma once
// Gradient clipping by norm (Keras' clipnorm, global_clipnorm) with clipvalue, as one rule for
// the host and the device: the squared norms are summed on the device (in double, in a fixed
// order) and the update's gradient is scaled there by the factor below, so no norm is read
// back and a clipped step can be captured.
#include <math.h>

#include "lockstep/core/host_device.hpp"

namespace lockstep::clip_math {

/// How an optimizer clips its gradients; 0 (or an infinite clipvalue) where it does not.
struct NormClip {
  double global_clipnorm = 0;  // every gradient scaled by min(1, global_clipnorm / (norm of all))
  double clipnorm = 0;         // each gradient scaled by min(1, clipnorm / (its own norm))
  float clipvalue = INFINITY;  // then each element clamped to [-clipvalue, clipvalue]
  float pad = 0;
};

/// The factor a gradient is scaled by, from the squared norm of all the step's gradients and
/// of its own (each read only where its clip is set), in double, rounded once to float32.
LOCKSTEP_HOST_DEVICE inline float clip_factor(const NormClip& c, const double* global_sq, const double* own_sq) {
  double scale = 1.0;
  if (c.global_clipnorm > 0) {
    const double norm = ::sqrt(*global_sq);
    if (norm > c.global_clipnorm) scale = c.global_clipnorm / norm;
  }
  if (c.clipnorm > 0) {
    const double norm = ::sqrt(*own_sq);
    if (norm > c.clipnorm) scale *= c.clipnorm / norm;
  }
  return static_cast<float>(scale);
}

}  // namespace lockstep::clip_math
