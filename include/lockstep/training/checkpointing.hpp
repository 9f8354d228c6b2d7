#pragma once
// Model-level checkpoint helpers over io/checkpoint.hpp: a Model's variables and optimizer.
#include <string>

#include "lockstep/io/checkpoint.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep {

using io::CheckpointOptions;
using io::TrainingState;

/// The state to save at `epoch` after `batch_in_epoch` batches of it (seed and optimizer from the model).
TrainingState make_training_state(const Model& model, int epoch, std::int64_t batch_in_epoch);

/// Writes <prefix>.safetensors and <prefix>.json for the model's variables and (when compiled)
/// its optimizer. Nothing is written when options.is_chief is false.
void save_checkpoint(const std::string& prefix, Model& model, const TrainingState& state,
                     const CheckpointOptions& options = {});

/// Verifies the checkpoint against the model and only then assigns it (see io::load_checkpoint).
/// The model must be built (its variables exist). Returns the saved TrainingState.
TrainingState load_checkpoint(const std::string& prefix, Model& model);

}  // namespace lockstep
