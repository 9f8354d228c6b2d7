// Prints lockstep's learning-rate schedules at steps 0..130, one "NAME STEP VALUE" line each, for
// keras_schedules.py to compare with Keras' own schedules (same names and arguments there).
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/optimizers/schedules.hpp"

int main() {
  namespace sch = lockstep::optimizers::schedules;
  const std::vector<std::pair<std::string, lockstep::optimizers::Schedule>> schedules{
      {"exponential", sch::ExponentialDecay(0.1, 7, 0.5)},
      {"exponential_staircase", sch::ExponentialDecay(0.1, 7, 0.5, true)},
      {"piecewise", sch::PiecewiseConstantDecay({3, 5, 60}, {3.0, 2.0, 1.0, 0.5})},
      {"cosine_alpha", sch::CosineDecay(0.2, 40, {.alpha = 0.1})},
      {"cosine_warmup", sch::CosineDecay(0.1, 100, {.warmup_target = 1.0, .warmup_steps = 10})},
      {"polynomial_power2", sch::PolynomialDecay(0.1, 10, 0.01, 2.0)},
      {"polynomial_cycle", sch::PolynomialDecay(0.1, 10, 0.01, 0.5, true)},
  };
  for (const auto& [name, schedule] : schedules)
    for (std::int64_t step = 0; step <= 130; ++step)
      std::printf("%s %lld %.17g\n", name.c_str(), static_cast<long long>(step), schedule(step));
  return 0;
}
