#pragma once
// How `lockstep train` turns --learning-rate, --lr-scaling, --lr-schedule and --warmup-epochs
// into the schedule it trains with (optimizers/schedules.hpp).
#include <cstdint>
#include <string>

#include "commands.hpp"
#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::cli {

struct LearningRatePlan {
  double peak = 0;               // the rate after scaling: what warmup rises to, decay starts from
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;
  optimizers::Schedule schedule;
  std::string description;       // one line, printed before training
};

/// ValueError (exit 2) naming the flag: warmup longer than training, or a base batch < 1.
LearningRatePlan plan_learning_rate(const TrainArgs& args, std::int64_t steps_per_epoch, std::int64_t global_batch);

}  // namespace lockstep::cli
