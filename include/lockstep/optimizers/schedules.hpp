#pragma once
// Keras 3's learning-rate schedules (keras.optimizers.schedules.*), with Keras' names, defaults
// and formulas, plus a linear warmup around any schedule and the linear scaling rule of large
// batches (Goyal et al. 2017). A schedule maps the optimizer's step (updates applied before this
// one, Keras' `optimizer.iterations`) to a learning rate; give it to OptimizerOptions::schedule,
// or call it in a custom loop:
//
//   optimizers::AdamOptions o;
//   o.schedule = optimizers::schedules::CosineDecay(1e-3, 10000, {.warmup_target = 4e-3,
//                                                                 .warmup_steps = 500});
//   model.compile(optimizers::Adam(o), ...);
//
// Every schedule is a pure function of the step (nothing stateful), so a resumed run recomputes
// its rate from the restored step.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::optimizers::schedules {

/// initial * decay_rate ^ (step / decay_steps); with staircase the exponent is floored.
Schedule ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate,
                          bool staircase = false);

/// values[0] while step <= boundaries[0], values[i] while boundaries[i-1] < step <= boundaries[i],
/// values.back() after the last boundary. Needs values.size() == boundaries.size() + 1 and
/// strictly increasing boundaries.
Schedule PiecewiseConstantDecay(std::vector<std::int64_t> boundaries, std::vector<double> values);

struct CosineDecayOptions {
  /// The floor, as a fraction of the rate decayed from.
  double alpha = 0.0;
  /// When set, the rate first rises linearly from initial_learning_rate to this over
  /// warmup_steps, then decays from it (Keras 3).
  std::optional<double> warmup_target;
  std::int64_t warmup_steps = 0;
};
/// Half a cosine from the rate to alpha x the rate over decay_steps (after any warmup), then flat.
Schedule CosineDecay(double initial_learning_rate, std::int64_t decay_steps, const CosineDecayOptions& options = {});

/// (initial - end) * (1 - step / decay_steps)^power + end. Without cycle the step stops at
/// decay_steps; with cycle decay_steps grows to the first multiple of itself >= step.
Schedule PolynomialDecay(double initial_learning_rate, std::int64_t decay_steps, double end_learning_rate = 0.0001,
                         double power = 1.0, bool cycle = false);

/// Rises linearly from initial_learning_rate to after(0) over warmup_steps, then follows
/// after(step - warmup_steps): the warmup of CosineDecay, for any schedule.
Schedule LinearWarmup(Schedule after, std::int64_t warmup_steps, double initial_learning_rate = 0.0);

/// A constant rate, as a schedule (so that a warmup can wrap it).
Schedule Constant(double learning_rate);

/// Keras' serialisation of a schedule made by ExponentialDecay, PiecewiseConstantDecay,
/// CosineDecay or PolynomialDecay ({"module": "keras.optimizers.schedules", "class_name",
/// "config", "registered_name"}, what keras.optimizers.schedules.serialize gives, and what an
/// optimizer's config holds as its learning_rate); null for any other schedule (LinearWarmup,
/// Constant, a function of one's own), which Keras has no class for.
nlohmann::json serialize(const Schedule& schedule);

/// The schedule a serialisation (as above, "module" optional) describes. ValueError naming a
/// class lockstep lacks, an argument it lacks, or a missing or mistyped one.
Schedule deserialize(const nlohmann::json& j);

/// The linear scaling rule: base_lr was tuned for base_batch; a global batch k times larger
/// uses k times the rate.
double scaled_learning_rate(double base_lr, std::int64_t base_batch, std::int64_t global_batch);

}  // namespace lockstep::optimizers::schedules
