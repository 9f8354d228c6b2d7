// Prints lockstep's learning-rate schedules at steps 0..130, one "NAME STEP VALUE" line each, for
// keras_schedules.py to compare with Keras' own schedules (same names and arguments there).
//   schedules_driver                 the schedules themselves
//   schedules_driver save DIR        DIR/NAME.keras: a small model compiled with Adam(schedule NAME)
//   schedules_driver load F.keras... the learning rate of each file's compiled optimizer, as F STEP VALUE
// (the last two for keras_schedule_files.py: schedules in Keras files, both ways). Errors: exit 1.
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/lockstep.hpp"

int main(int argc, char** argv) {
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
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "save" && argc == 3) {
      for (const auto& [name, schedule] : schedules) {
        lockstep::Sequential model({lockstep::layers::Dense(2, "softmax", 3)}, name);
        lockstep::optimizers::AdamOptions o;
        o.schedule = schedule;
        model.compile(lockstep::optimizers::Adam(o), lockstep::losses::SparseCategoricalCrossentropy(), {"accuracy"});
        lockstep::save_model(model, std::string(argv[2]) + "/" + name + ".keras");
      }
      return 0;
    }
    if (mode == "load") {
      for (int i = 2; i < argc; ++i) {
        const auto model = lockstep::load_model(argv[i]);
        if (!model->compiled()) throw std::runtime_error(std::string(argv[i]) + " loaded uncompiled");
        for (std::int64_t step = 0; step <= 130; ++step)
          std::printf("%s %lld %.17g\n", argv[i], static_cast<long long>(step), model->optimizer()->learning_rate_at(step));
      }
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "schedules_driver: %s\n", e.what());
    return 1;
  }
  if (!mode.empty()) {
    std::fprintf(stderr, "usage: schedules_driver [save DIR | load F.keras...]\n");
    return 1;
  }
  for (const auto& [name, schedule] : schedules)
    for (std::int64_t step = 0; step <= 130; ++step)
      std::printf("%s %lld %.17g\n", name.c_str(), static_cast<long long>(step), schedule(step));
  return 0;
}
