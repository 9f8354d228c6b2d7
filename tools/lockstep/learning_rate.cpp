#include "learning_rate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lockstep/core/error.hpp"
#include "lockstep/optimizers/schedules.hpp"

namespace lockstep::cli {

namespace sch = optimizers::schedules;

LearningRatePlan plan_learning_rate(const TrainArgs& a, std::int64_t steps_per_epoch, std::int64_t global_batch) {
  LOCKSTEP_CHECK(a.warmup_epochs <= a.epochs, "--warmup-epochs ", a.warmup_epochs, " is longer than the training (",
                 a.epochs, " epoch", a.epochs == 1 ? "" : "s", "); give at most --epochs");
  LearningRatePlan p;
  p.peak = a.lr_scaling == "linear" ? sch::scaled_learning_rate(a.learning_rate, a.lr_base_batch, global_batch)
                                    : a.learning_rate;
  p.total_steps = steps_per_epoch * a.epochs;
  p.warmup_steps = static_cast<std::int64_t>(std::llround(a.warmup_epochs * static_cast<double>(steps_per_epoch)));
  // The decay runs over what the warmup leaves (at least one step, so that it is defined).
  const std::int64_t decay_steps = std::max<std::int64_t>(1, p.total_steps - p.warmup_steps);
  char buf[256];
  std::string what;
  if (a.lr_schedule == "cosine") {
    p.schedule = sch::CosineDecay(p.warmup_steps > 0 ? 0.0 : p.peak, decay_steps,
                                  {.warmup_target = p.peak, .warmup_steps = p.warmup_steps});
    std::snprintf(buf, sizeof buf, "cosine decay to 0 over %lld steps", static_cast<long long>(decay_steps));
    what = buf;
  } else {
    optimizers::Schedule after;
    if (a.lr_schedule == "exponential") {
      // A tenth of the rate by the end of training.
      after = sch::ExponentialDecay(p.peak, decay_steps, 0.1);
      std::snprintf(buf, sizeof buf, "exponential decay to a tenth over %lld steps", static_cast<long long>(decay_steps));
      what = buf;
    } else if (a.lr_schedule == "piecewise") {
      // The step recipe of large-batch ImageNet training: a tenth at 1/2 and 3/4 of the decay.
      const std::int64_t b1 = std::max<std::int64_t>(1, decay_steps / 2);
      const std::int64_t b2 = std::max<std::int64_t>(b1 + 1, decay_steps * 3 / 4);
      after = sch::PiecewiseConstantDecay({b1, b2}, {p.peak, p.peak / 10, p.peak / 100});
      std::snprintf(buf, sizeof buf, "piecewise constant: x0.1 after step %lld, x0.01 after step %lld",
                    static_cast<long long>(b1 + p.warmup_steps), static_cast<long long>(b2 + p.warmup_steps));
      what = buf;
    } else {
      after = sch::Constant(p.peak);
      what = "constant";
    }
    p.schedule = p.warmup_steps > 0 ? sch::LinearWarmup(after, p.warmup_steps, 0.0) : after;
  }
  std::string scaling;
  if (a.lr_scaling == "linear") {
    std::snprintf(buf, sizeof buf, " (--learning-rate %g x global batch %lld / base batch %lld, linear scaling)",
                  a.learning_rate, static_cast<long long>(global_batch), static_cast<long long>(a.lr_base_batch));
    scaling = buf;
  }
  std::string warmup;
  if (p.warmup_steps > 0) {
    std::snprintf(buf, sizeof buf, "linear warmup from 0 over %lld steps, then ", static_cast<long long>(p.warmup_steps));
    warmup = buf;
  }
  std::snprintf(buf, sizeof buf, "Learning rate: %g%s; schedule: ", p.peak, scaling.c_str());
  p.description = buf + warmup + what;
  return p;
}

}  // namespace lockstep::cli
