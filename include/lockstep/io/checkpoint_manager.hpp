#pragma once
// Numbered checkpoints in one directory with a pointer file, as TensorFlow's CheckpointManager
// and its `checkpoint` file: each save writes a fresh prefix <dir>/<name>-<n>, and only once its
// two files are whole is <dir>/checkpoint (JSON: latest and all kept prefixes) atomically
// replaced. A crash at any moment leaves `checkpoint` naming a complete pair.
#include <optional>
#include <string>
#include <vector>

#include "lockstep/io/checkpoint.hpp"

namespace lockstep::io {

struct CheckpointManagerOptions {
  /// Checkpoints kept; older ones are deleted after a save. 0 keeps all.
  int max_to_keep = 5;
  /// File name stem of each checkpoint: <dir>/<name>-<n>.{safetensors,json}.
  std::string name = "ckpt";
  bool is_chief = true;
};

class CheckpointManager {
 public:
  /// Reads <directory>/checkpoint when it exists (IOError if it is malformed).
  explicit CheckpointManager(std::string directory, CheckpointManagerOptions options = {});

  /// Saves a new checkpoint and returns its prefix (empty on a non-chief, which writes nothing).
  std::string save(const std::vector<Variable>& variables, optimizers::Optimizer* optimizer,
                   const TrainingState& state, const CheckpointOptions& options = {});
  /// The prefix of the newest complete checkpoint, if any.
  std::optional<std::string> latest() const;
  /// Kept prefixes, oldest first.
  std::vector<std::string> checkpoints() const;
  const std::string& directory() const { return directory_; }
  /// Deletes every checkpoint and the pointer file (BackupAndRestore does this when training ends).
  void remove_all();

 private:
  void write_pointer() const;
  std::string directory_;
  CheckpointManagerOptions options_;
  std::vector<std::string> kept_;  // file names relative to directory_, oldest first
  std::int64_t next_number_ = 1;
};

}  // namespace lockstep::io
