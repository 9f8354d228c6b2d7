#pragma once
// The dynamic loss scale (Keras' LossScaleOptimizer) as one rule for the host and the device:
// how a step's finiteness moves the scale, and the two float32 factors a step takes from it
// (the loss's output gradient and the gradients' unscaling), so that a step whose scale is kept
// on the device gives the bits of one whose scale is kept on the host.
#include <cstdint>

#include "lockstep/core/host_device.hpp"

namespace lockstep::loss_scale_math {

/// What the scale carries from step to step.
struct LossScaleState {
  double scale = 32768.0;     // 2^15, Keras' default
  std::int64_t counter = 0;   // finite steps since the scale last changed
  std::int64_t skipped = 0;   // steps skipped because a gradient was infinite or NaN
};

/// After a step: a finite one counts, and after `growth_steps` of them in a row the scale doubles
/// (not past 1e30, where float32 could no longer hold the scaled loss); a step that was not
/// finite halves it (never below 1: a scale under 1 would push small gradients further into
/// underflow) and counts as skipped.
LOCKSTEP_HOST_DEVICE inline void update(LossScaleState& s, bool finite, std::int64_t growth_steps) {
  if (!finite) {
    s.scale = s.scale / 2 < 1.0 ? 1.0 : s.scale / 2;
    s.counter = 0;
    ++s.skipped;
    return;
  }
  if (++s.counter >= growth_steps) {
    if (s.scale < 1e30) s.scale *= 2;
    s.counter = 0;
  }
}

/// The factor the summed loss is multiplied by (its output gradient): the mean's 1/n times the
/// scale, in double, rounded once to float32.
LOCKSTEP_HOST_DEVICE inline float loss_factor(double inverse_n, double scale) {
  return static_cast<float>(inverse_n * scale);
}

/// The factor every gradient is multiplied by before the update: 1/scale rounded to float32.
LOCKSTEP_HOST_DEVICE inline float unscale_factor(double scale) { return static_cast<float>(1.0 / scale); }

}  // namespace lockstep::loss_scale_math
