#pragma once
// A schedule as the device can evaluate it (schedule_math::ScheduleDesc): for the
// optimizer, which derives each step's rate from it (on the host now, on the device in a
// captured step).
#include <optional>

#include "lockstep/core/schedule_math.hpp"
#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::optimizers::schedules {

/// The description of a schedule made by ExponentialDecay, PiecewiseConstantDecay (up to
/// kMaxPiecewiseBoundaries boundaries), CosineDecay, PolynomialDecay or Constant, or a
/// LinearWarmup around one of these; nullopt for any other (a function of one's own).
std::optional<schedule_math::ScheduleDesc> describe(const Schedule& schedule);

/// What a step with `schedule` cannot do on the device, or null: "a learning-rate schedule given
/// as a function" where describe() has no description of it.
const char* capture_refusal(const Schedule& schedule);

}  // namespace lockstep::optimizers::schedules
