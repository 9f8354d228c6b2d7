#pragma once
// The learning-rate schedules' math, written once for the host and the device: Keras' formulas
// (keras.optimizers.schedules), each a function of plain numbers, and ScheduleDesc, a POD
// description of a schedule (its kind and Keras' arguments) that schedule_rate evaluates. The
// schedules' callables (src/nn/schedules.cpp) and Optimizer::learning_rate_at compute through
// these functions, and a kernel can evaluate a ScheduleDesc on the device from the step count it
// holds there, so a captured step needs no rate from the host. The schedules' own header
// (lockstep/optimizers/schedules.hpp) is the API; this is their arithmetic.
//
// The expressions and their double roundings are Keras' (and the ones lockstep always had): the
// host gets the same bits as before. Under nvcc, pow and cos are CUDA's (within 2 ulp of glibc's)
// and products may be fused: a rate derived on the device can differ from the host's in its last
// bits.
#include <math.h>

#include <cstdint>

#include "lockstep/core/host_device.hpp"

namespace lockstep::schedule_math {

/// The step as a double, never below 0 (the step count is >= 0; Keras casts it).
LOCKSTEP_HOST_DEVICE inline double as_double(std::int64_t step) { return static_cast<double>(step > 0 ? step : 0); }
LOCKSTEP_HOST_DEVICE inline double min_of(double a, double b) { return b < a ? b : a; }  // std::min's choice

/// initial * decay_rate ^ (step / decay_steps); with staircase the exponent is floored.
LOCKSTEP_HOST_DEVICE inline double exponential(double initial, std::int64_t decay_steps, double decay_rate,
                                               bool staircase, std::int64_t step) {
  double p = as_double(step) / static_cast<double>(decay_steps);
  if (staircase) p = floor(p);
  return initial * pow(decay_rate, p);
}

/// values[i] for the first boundary the step has not passed (step <= boundaries[i]), else the last
/// value; n boundaries, n + 1 values, boundaries increasing.
LOCKSTEP_HOST_DEVICE inline double piecewise(const std::int64_t* boundaries, const double* values, int n,
                                             std::int64_t step) {
  int i = 0;
  while (i < n && boundaries[i] < step) ++i;
  return values[i];
}

/// Half a cosine from `from` down to alpha * from over decay_steps.
LOCKSTEP_HOST_DEVICE inline double cosine_decayed(double step, double from, std::int64_t decay_steps, double alpha) {
  constexpr double kPi = 3.141592653589793238462643383279502884;  // std::numbers::pi
  const double cosine = 0.5 * (1.0 + cos(kPi * step / static_cast<double>(decay_steps)));
  return from * ((1.0 - alpha) * cosine + alpha);
}
/// Keras 3's CosineDecay: with a warmup target, first linear from initial to it over warmup_steps.
LOCKSTEP_HOST_DEVICE inline double cosine(double initial, std::int64_t decay_steps, double alpha, bool has_target,
                                          double target, std::int64_t warmup_steps, std::int64_t step) {
  const double decay = static_cast<double>(decay_steps);
  if (!has_target) return cosine_decayed(min_of(as_double(step), decay), initial, decay_steps, alpha);
  const double warmup = static_cast<double>(warmup_steps);
  const double s = min_of(as_double(step), decay + warmup);
  if (s < warmup) return (target - initial) * (s / warmup) + initial;
  return cosine_decayed(s - warmup, target, decay_steps, alpha);
}

/// (initial - end) * (1 - step / decay_steps)^power + end; cycle: decay_steps grows to the first
/// multiple of itself >= step (1 at step 0, as Keras), else the step stops at decay_steps.
LOCKSTEP_HOST_DEVICE inline double polynomial(double initial, std::int64_t decay_steps, double end, double power,
                                              bool cycle, std::int64_t step_in) {
  double step = as_double(step_in);
  double steps = static_cast<double>(decay_steps);
  if (cycle) {
    steps *= step == 0 ? 1.0 : ceil(step / steps);
  } else {
    step = min_of(step, steps);
  }
  return (initial - end) * pow(1.0 - step / steps, power) + end;
}

/// LinearWarmup's ramp before warmup_steps: from initial to target (the wrapped schedule's rate
/// at its step 0).
LOCKSTEP_HOST_DEVICE inline double warmup_ramp(double initial, double target, std::int64_t warmup_steps,
                                               std::int64_t step) {
  return (target - initial) * (as_double(step) / static_cast<double>(warmup_steps)) + initial;
}

enum class ScheduleKind : std::uint8_t { kConstant, kExponential, kPiecewise, kCosine, kPolynomial };

/// The most boundaries a PiecewiseConstantDecay's description holds (one with more has none:
/// the host evaluates it, and a captured step refuses it).
constexpr int kMaxPiecewiseBoundaries = 32;

/// A schedule as plain numbers: kind + Keras' arguments (those of other kinds unused), and an
/// optional LinearWarmup around it.
struct ScheduleDesc {
  ScheduleKind kind = ScheduleKind::kConstant;
  double initial = 0;  // kConstant's rate; the other kinds' initial_learning_rate
  std::int64_t decay_steps = 1;
  double decay_rate = 0;  // kExponential
  bool staircase = false;  // kExponential
  double alpha = 0;  // kCosine
  bool has_warmup_target = false;  // kCosine
  double warmup_target = 0;  // kCosine
  std::int64_t warmup_steps = 0;  // kCosine
  double end = 0, power = 1;  // kPolynomial
  bool cycle = false;  // kPolynomial
  int n_boundaries = 0;  // kPiecewise
  std::int64_t boundaries[kMaxPiecewiseBoundaries] = {};
  double values[kMaxPiecewiseBoundaries + 1] = {};
  // LinearWarmup around the schedule above.
  bool linear_warmup = false;
  std::int64_t linear_warmup_steps = 0;
  double linear_warmup_initial = 0, linear_warmup_target = 0;
};

/// The schedule's kind alone, without a warmup.
LOCKSTEP_HOST_DEVICE inline double base_rate(const ScheduleDesc& d, std::int64_t step) {
  switch (d.kind) {
    case ScheduleKind::kExponential: return exponential(d.initial, d.decay_steps, d.decay_rate, d.staircase, step);
    case ScheduleKind::kPiecewise: return piecewise(d.boundaries, d.values, d.n_boundaries, step);
    case ScheduleKind::kCosine:
      return cosine(d.initial, d.decay_steps, d.alpha, d.has_warmup_target, d.warmup_target, d.warmup_steps, step);
    case ScheduleKind::kPolynomial: return polynomial(d.initial, d.decay_steps, d.end, d.power, d.cycle, step);
    case ScheduleKind::kConstant: break;
  }
  return d.initial;
}

/// The learning rate of step `step` (updates applied before this one).
LOCKSTEP_HOST_DEVICE inline double schedule_rate(const ScheduleDesc& d, std::int64_t step) {
  if (d.linear_warmup && step < d.linear_warmup_steps)
    return warmup_ramp(d.linear_warmup_initial, d.linear_warmup_target, d.linear_warmup_steps, step);
  return base_rate(d, d.linear_warmup ? step - d.linear_warmup_steps : step);
}

}  // namespace lockstep::schedule_math
