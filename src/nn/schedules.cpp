#include "lockstep/optimizers/schedules.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "lockstep/core/error.hpp"

namespace lockstep::optimizers::schedules {

namespace {
// A rate that is infinite, NaN or negative trains to NaN, silently: refused where it is given.
void check_rate(double v, const char* schedule, const char* what) {
  LOCKSTEP_CHECK(std::isfinite(v) && v >= 0, schedule, ": ", what, " must be a finite number >= 0, got ", v);
}
void check_steps(std::int64_t v, const char* schedule, const char* what) {
  LOCKSTEP_CHECK(v > 0, schedule, ": ", what, " must be > 0, got ", v);
}
double as_double(std::int64_t step) { return static_cast<double>(std::max<std::int64_t>(step, 0)); }
}  // namespace

Schedule ExponentialDecay(double initial, std::int64_t decay_steps, double decay_rate, bool staircase) {
  check_rate(initial, "ExponentialDecay", "initial_learning_rate");
  check_steps(decay_steps, "ExponentialDecay", "decay_steps");
  check_rate(decay_rate, "ExponentialDecay", "decay_rate");
  return [=](std::int64_t step) {
    double p = as_double(step) / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return initial * std::pow(decay_rate, p);
  };
}

Schedule PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values) {
  LOCKSTEP_CHECK(values.size() == boundaries.size() + 1, "PiecewiseConstantDecay: needs one more value than boundaries, got ",
                 boundaries.size(), " boundaries and ", values.size(), " values");
  for (std::size_t i = 1; i < boundaries.size(); ++i)
    LOCKSTEP_CHECK(boundaries[i] > boundaries[i - 1], "PiecewiseConstantDecay: boundaries must increase, got ",
                   boundaries[i - 1], " then ", boundaries[i]);
  for (double v : values) check_rate(v, "PiecewiseConstantDecay", "every value");
  return [b = std::move(boundaries), v = std::move(values)](std::int64_t step) {
    // The first boundary the step has not passed (step <= boundary) picks the value.
    const auto it = std::lower_bound(b.begin(), b.end(), step);
    return v[static_cast<std::size_t>(it - b.begin())];
  };
}

Schedule CosineDecay(double initial, std::int64_t decay_steps, const CosineDecayOptions& o) {
  check_rate(initial, "CosineDecay", "initial_learning_rate");
  check_steps(decay_steps, "CosineDecay", "decay_steps");
  LOCKSTEP_CHECK(std::isfinite(o.alpha) && o.alpha >= 0 && o.alpha <= 1, "CosineDecay: alpha must be in [0, 1], got ",
                 o.alpha);
  LOCKSTEP_CHECK(o.warmup_steps >= 0, "CosineDecay: warmup_steps must be >= 0, got ", o.warmup_steps);
  if (o.warmup_target) check_rate(*o.warmup_target, "CosineDecay", "warmup_target");
  const double decay = static_cast<double>(decay_steps);
  const auto decayed = [decay, alpha = o.alpha](double step, double from) {
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * step / decay));
    return from * ((1.0 - alpha) * cosine + alpha);
  };
  if (!o.warmup_target)
    return [=](std::int64_t step) { return decayed(std::min(as_double(step), decay), initial); };
  const double target = *o.warmup_target;
  const double warmup = static_cast<double>(o.warmup_steps);
  return [=](std::int64_t step) {
    const double s = std::min(as_double(step), decay + warmup);
    if (s < warmup) return (target - initial) * (s / warmup) + initial;
    return decayed(s - warmup, target);
  };
}

Schedule PolynomialDecay(double initial, std::int64_t decay_steps, double end, double power, bool cycle) {
  check_rate(initial, "PolynomialDecay", "initial_learning_rate");
  check_steps(decay_steps, "PolynomialDecay", "decay_steps");
  check_rate(end, "PolynomialDecay", "end_learning_rate");
  LOCKSTEP_CHECK(std::isfinite(power) && power > 0, "PolynomialDecay: power must be a finite number > 0, got ", power);
  return [=](std::int64_t step_in) {
    double step = as_double(step_in);
    double steps = static_cast<double>(decay_steps);
    if (cycle) {
      // The first multiple of decay_steps that is >= step (1 at step 0, as Keras).
      steps *= step == 0 ? 1.0 : std::ceil(step / steps);
    } else {
      step = std::min(step, steps);
    }
    return (initial - end) * std::pow(1.0 - step / steps, power) + end;
  };
}

Schedule LinearWarmup(Schedule after, std::int64_t warmup_steps, double initial) {
  LOCKSTEP_CHECK(static_cast<bool>(after), "LinearWarmup: the schedule to warm up into is empty");
  LOCKSTEP_CHECK(warmup_steps >= 0, "LinearWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  check_rate(initial, "LinearWarmup", "initial_learning_rate");
  const double target = after(0);
  return [after = std::move(after), warmup_steps, initial, target](std::int64_t step) {
    if (step >= warmup_steps) return after(step - warmup_steps);
    return (target - initial) * (as_double(step) / static_cast<double>(warmup_steps)) + initial;
  };
}

Schedule Constant(double learning_rate) {
  check_rate(learning_rate, "Constant", "learning_rate");
  return [learning_rate](std::int64_t) { return learning_rate; };
}

double scaled_learning_rate(double base_lr, std::int64_t base_batch, std::int64_t global_batch) {
  check_rate(base_lr, "scaled_learning_rate", "base_lr");
  LOCKSTEP_CHECK(base_batch > 0 && global_batch > 0, "scaled_learning_rate: batch sizes must be > 0, got base_batch ",
                 base_batch, " and global_batch ", global_batch);
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(base_batch);
}

}  // namespace lockstep::optimizers::schedules
