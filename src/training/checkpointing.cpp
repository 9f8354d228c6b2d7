#include "lockstep/training/checkpointing.hpp"

#include <algorithm>

#include "lockstep/optimizers/loss_scale_optimizer.hpp"

namespace lockstep {

void add_optimizer_state(TrainingState& s, const optimizers::Optimizer* optimizer) {
  if (!optimizer) return;
  s.iterations = optimizer->iterations();
  s.learning_rate = optimizer->current_learning_rate();
  s.learning_rate_from_schedule = static_cast<bool>(optimizer->options().schedule);
  // Dynamic loss scaling resumes where it was, so that a resumed float16 run stays identical.
  if (const auto* ls = dynamic_cast<const optimizers::LossScaleOptimizer*>(optimizer)) {
    s.loss_scale = ls->loss_scale();
    s.values["loss_scale/step_counter"] = static_cast<double>(ls->step_counter());
    s.values["loss_scale/skipped_steps"] = static_cast<double>(ls->skipped_steps());
  }
}

TrainingState make_training_state(const Model& model, int epoch, std::int64_t batch_in_epoch) {
  TrainingState s;
  s.epoch = epoch;
  s.batch_in_epoch = batch_in_epoch;
  s.seed = model.seed();
  add_optimizer_state(s, model.optimizer().get());
  // The running averages of the interrupted epoch, so that its logs continue unchanged.
  for (const auto& [name, state] : model.metric_states())
    for (std::size_t i = 0; i < state.size(); ++i) s.values["metrics/" + name + "/" + std::to_string(i)] = state[i];
  return s;
}

void save_checkpoint(const std::string& prefix, Model& model, const TrainingState& state,
                     const CheckpointOptions& options) {
  LOCKSTEP_CHECK(model.built(), "save_checkpoint: model '", model.name(), "' is not built, so it has no variables yet");
  CheckpointOptions o = options;
  io::save_checkpoint(prefix, model.variables(), model.optimizer().get(), state, o);
}

TrainingState load_checkpoint_into(const std::string& prefix, const std::vector<Variable>& variables,
                                   optimizers::Optimizer* optimizer) {
  TrainingState st = io::load_checkpoint(prefix, variables, optimizer);
  if (auto* ls = dynamic_cast<optimizers::LossScaleOptimizer*>(optimizer)) {
    const auto value = [&](const char* key) {
      const auto it = st.values.find(key);
      return it == st.values.end() ? 0.0 : it->second;
    };
    ls->set_state(std::max(1.0, st.loss_scale), static_cast<std::int64_t>(value("loss_scale/step_counter")),
                  static_cast<std::int64_t>(value("loss_scale/skipped_steps")));
  }
  return st;
}

TrainingState load_checkpoint(const std::string& prefix, Model& model) {
  LOCKSTEP_CHECK(model.built(), "load_checkpoint: build model '", model.name(),
                 "' first (call build() or fit one batch) so its variables exist");
  return load_checkpoint_into(prefix, model.variables(), model.optimizer().get());
}

}  // namespace lockstep
