#pragma once
// Checkpoints: a pair of files per checkpoint prefix P.
//   P.safetensors  the variables by name ("dense/kernel") and the optimizer's slots
//                  ("optimizer/dense/kernel/m"), in the order of the variable list
//   P.json         the commit record: format version, TrainingState, the tensor list with
//                  shapes, the CRC-32C and size of P.safetensors, and the CRC-32C of the record
//                  itself (so an edited epoch or iteration count is refused, not trained on)
// Both are written with write_file_atomic, the tensors first and the JSON last, so the JSON
// never describes tensors that are not fully on disk; a crash between the two leaves an old JSON
// whose checksum no longer matches, which load reports instead of loading a mix. To keep a
// loadable checkpoint across crashes, save to a fresh prefix each time and move a pointer
// afterwards: CheckpointManager (checkpoint_manager.hpp) does that.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lockstep/autograd/variable.hpp"
#include "lockstep/io/safetensors.hpp"
#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::io {

/// Bumped whenever the files' meaning changes; load refuses any other version.
inline constexpr int kCheckpointFormatVersion = 2;  // 2: the record carries its own CRC

/// Where training stands, everything beyond tensors needed to resume it.
struct TrainingState {
  /// The epoch to resume in (0-based): epochs before it are complete.
  int epoch = 0;
  /// Batches of `epoch` already trained; 0 at an epoch boundary.
  std::int64_t batch_in_epoch = 0;
  /// Optimizer updates so far (the global step). save() records the optimizer's own count.
  std::int64_t iterations = 0;
  /// The model's seed: weights, dropout masks and per-epoch shuffle orders derive from it and
  /// the step/epoch, so seed + epoch + batch_in_epoch reproduce the data order exactly.
  std::uint64_t seed = 0;
  /// The optimizer's learning rate at save time, and whether it came from a schedule (then the
  /// schedule recomputes it from `iterations`; otherwise load sets it, since ReduceLROnPlateau
  /// and LearningRateScheduler change it).
  double learning_rate = 0.0;
  bool learning_rate_from_schedule = false;
  /// Dynamic loss scale for mixed precision (not yet used: always 1).
  double loss_scale = 1.0;
  /// Callbacks' own state by key, e.g. "early_stopping/best".
  std::map<std::string, double> values;
  /// The configuration of the run that saved it (BackupAndRestoreOptions::run_config: for
  /// `lockstep train`, its flags), so that a resume can refuse to mix old and new settings.
  std::map<std::string, std::string> run_config;
};

struct CheckpointOptions {
  /// Only the chief worker writes; on the others save_checkpoint does nothing, as Keras.
  bool is_chief = true;
  /// Also save the optimizer's slots and iteration count (Keras' save_weights_only = false).
  bool include_optimizer = true;
};

/// Writes P.safetensors then P.json (see above). `optimizer` may be null. Creates P's directory.
/// Throws ValueError for duplicate variable names, IOError when a file cannot be written (the
/// previous files at P are then left as they were).
void save_checkpoint(const std::string& prefix, const std::vector<Variable>& variables,
                     optimizers::Optimizer* optimizer, const TrainingState& state, const CheckpointOptions& options = {});

/// A checkpoint read and verified, nothing assigned.
struct Checkpoint {
  TrainingState state;
  SafetensorsContent tensors;
  bool has_optimizer = false;
  std::string optimizer_name;
};

/// Reads P.json and P.safetensors and checks the format version, the record's own checksum, the
/// range of every TrainingState field, the checksum and size of the tensors file, and that the
/// tensors are exactly those the JSON lists. IOError names the file and the problem (wrong
/// version: the expected and the found one; a field: its name, value and allowed range).
Checkpoint read_checkpoint(const std::string& prefix);

/// read_checkpoint, then checks every variable (and, when the checkpoint has them and
/// `optimizer` is given, every optimizer slot) is present with the same shape and dtype, and
/// that the checkpoint holds no tensor the model lacks; only then assigns values, slots,
/// iterations and (when not scheduled) the learning rate, so a bad file never half-loads.
/// IOError names the missing, unexpected or mis-shaped tensor.
TrainingState load_checkpoint(const std::string& prefix, const std::vector<Variable>& variables,
                              optimizers::Optimizer* optimizer);

/// Checks that `content` holds every variable (and, when `optimizer` is given, every slot of every
/// trainable variable, created on demand) with the variable's shape and dtype, and no tensor the
/// model lacks (tensors named "optimizer/..." are ignored when `optimizer` is null); only then
/// copies them in, so a bad file never half-loads. IOError starts with `source` (e.g.
/// "checkpoint 'p.safetensors'") and names the missing, unexpected or mis-shaped tensor.
void assign_verified(const SafetensorsContent& content, const std::string& source,
                     const std::vector<Variable>& variables, optimizers::Optimizer* optimizer);

/// optimizer.slots(v) for saving: a ValueError while this worker holds only its shards of them
/// (a live sharded update over several workers says so, slots_held_in_shards, until
/// Model::gather_optimizer_slots() runs).
std::vector<std::pair<std::string, Tensor>> slots_to_save(optimizers::Optimizer& optimizer, const Variable& v);

/// The safetensors name of an optimizer slot: "optimizer/<variable>/<slot>".
std::string slot_tensor_name(const std::string& variable_name, const std::string& slot_name);

}  // namespace lockstep::io
