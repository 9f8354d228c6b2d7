#pragma once
// Model-level checkpoint helpers over io/checkpoint.hpp: a Model's variables and optimizer.
#include <string>
#include <vector>

#include "lockstep/io/checkpoint.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep {

using io::CheckpointOptions;
using io::TrainingState;

/// Adds the optimizer's part of a TrainingState (iterations, learning rate, loss scale); none when null.
void add_optimizer_state(TrainingState& state, const optimizers::Optimizer* optimizer);

/// The state to save at `epoch` after `batch_in_epoch` batches of it (seed and optimizer from the model).
TrainingState make_training_state(const Model& model, int epoch, std::int64_t batch_in_epoch);

/// Writes <prefix>.safetensors and <prefix>.json for the model's variables and (when compiled)
/// its optimizer. Nothing is written when options.is_chief is false.
void save_checkpoint(const std::string& prefix, Model& model, const TrainingState& state,
                     const CheckpointOptions& options = {});

/// Verifies the checkpoint against the model and only then assigns it (see io::load_checkpoint).
/// The model must be built (its variables exist). Returns the saved TrainingState.
TrainingState load_checkpoint(const std::string& prefix, Model& model);

/// io::load_checkpoint into variables trained outside fit (a custom loop's, tf.train.Checkpoint)
/// and their optimizer (may be null), whose loss scale state it restores too.
TrainingState load_checkpoint_into(const std::string& prefix, const std::vector<Variable>& variables,
                                   optimizers::Optimizer* optimizer);

}  // namespace lockstep
