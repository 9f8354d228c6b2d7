// ModelCheckpoint and BackupAndRestore.
#include <cmath>
#include <cstdio>
#include <limits>

#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/checkpointing.hpp"
#include "lockstep/training/filepath_format.hpp"
#include "lockstep/training/model.hpp"
#include "training/monitor_mode.hpp"

namespace lockstep {

bool Callback::writes_files(const std::optional<bool>& is_chief) const {
  if (is_chief) return *is_chief;
  const distribute::Strategy* strategy = model_ != nullptr ? model_->strategy() : nullptr;
  return strategy == nullptr || strategy->is_chief();
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options)
    : o_(std::move(options)),
      greater_(detail::monitor_greater_is_better(o_.mode, o_.monitor, "ModelCheckpoint")),
      best_(o_.initial_value_threshold.value_or(greater_ ? -std::numeric_limits<double>::infinity()
                                                         : std::numeric_limits<double>::infinity())) {
  LOCKSTEP_CHECK(!o_.filepath.empty(), "ModelCheckpoint: filepath is empty");
  LOCKSTEP_CHECK(o_.save_freq.batches >= 0, "ModelCheckpoint: save_freq must be 'epoch' or a positive number of batches");
  const std::string ext = ".safetensors";
  if (o_.filepath.size() > ext.size() && o_.filepath.ends_with(ext)) o_.filepath.resize(o_.filepath.size() - ext.size());
}

void ModelCheckpoint::on_epoch_begin(int epoch, const Logs&) { epoch_ = epoch; }

void ModelCheckpoint::on_train_batch_end(std::int64_t batch, const Logs& logs) {
  const std::int64_t ran = span_.end(batch);
  if (o_.save_freq.batches <= 0) return;
  if ((batches_since_save_ += ran) >= o_.save_freq.batches) {
    batches_since_save_ = 0;
    save(epoch_, batch, logs);
  }
}

void ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  if (o_.save_freq.batches <= 0) save(epoch, std::nullopt, logs);
}

void ModelCheckpoint::save(int epoch, std::optional<std::int64_t> batch, const Logs& logs) {
  LOCKSTEP_ASSERT(model_ != nullptr);
  std::map<std::string, std::int64_t> ints{{"epoch", epoch + 1}};
  if (batch) ints["batch"] = *batch + 1;
  // Formatting first: a template naming a missing metric fails even when nothing would be saved.
  const std::string prefix = format_filepath(o_.filepath, ints, logs);
  if (o_.save_best_only) {
    const auto it = logs.find(o_.monitor);
    if (it == logs.end()) {
      std::fprintf(stderr, "WARNING: ModelCheckpoint can save the best model only with %s available, skipping.\n",
                   o_.monitor.c_str());
      return;
    }
    const double current = it->second;
    const bool better = greater_ ? current > best_ : current < best_;
    if (!better) {
      if (o_.verbose > 0)
        std::printf("\nEpoch %d: %s did not improve from %.5f\n", epoch + 1, o_.monitor.c_str(), best_);
      return;
    }
    if (o_.verbose > 0)
      std::printf("\nEpoch %d: %s improved from %.5f to %.5f, saving model to %s\n", epoch + 1, o_.monitor.c_str(),
                  best_, current, prefix.c_str());
    best_ = current;
  } else if (o_.verbose > 0) {
    std::printf("\nEpoch %d: saving model to %s\n", epoch + 1, prefix.c_str());
  }
  // An epoch-end save marks the epoch complete; a batch save is inside the epoch.
  const TrainingState state = batch ? make_training_state(*model_, epoch, *batch + 1)
                                    : make_training_state(*model_, epoch + 1, 0);
  save_checkpoint(prefix, *model_, state,
                  {.is_chief = writes_files(o_.is_chief), .include_optimizer = !o_.save_weights_only});
  saved_.push_back(prefix);
}

BackupAndRestore::BackupAndRestore(BackupAndRestoreOptions options)
    : o_(std::move(options)),
      manager_(o_.backup_dir, {.max_to_keep = 2, .name = "backup"}) {
  LOCKSTEP_CHECK(!o_.backup_dir.empty(), "BackupAndRestore: backup_dir is empty");
  LOCKSTEP_CHECK(o_.save_freq.batches >= 0, "BackupAndRestore: save_freq must be 'epoch' or a positive number of batches");
}

std::optional<io::TrainingState> BackupAndRestore::restore() {
  LOCKSTEP_ASSERT(model_ != nullptr);
  const auto latest = manager_.latest();
  if (!latest) return std::nullopt;
  return load_checkpoint(*latest, *model_);
}

void BackupAndRestore::on_train_begin(const Logs&) {
  restored_.reset();
  last_saved_.reset();
  // An unbuilt model has no variables to restore into; fit builds it on the first batch.
  if (model_ != nullptr && model_->built()) restored_ = restore();
}

void BackupAndRestore::on_epoch_begin(int epoch, const Logs&) {
  epoch_ = epoch;
  batches_since_save_ = 0;
}

void BackupAndRestore::on_train_batch_end(std::int64_t batch, const Logs&) {
  const std::int64_t ran = span_.end(batch);
  if (o_.save_freq.batches <= 0) return;
  if ((batches_since_save_ += ran) >= o_.save_freq.batches) {
    batches_since_save_ = 0;
    save(epoch_, batch + 1);
  }
}

void BackupAndRestore::on_epoch_end(int epoch, const Logs&) { save(epoch + 1, 0); }

void BackupAndRestore::backup_now(int epoch, std::int64_t batch_in_epoch) {
  if (last_saved_ != std::pair{epoch, batch_in_epoch}) save(epoch, batch_in_epoch);
}

void BackupAndRestore::save(int epoch, std::int64_t batch_in_epoch) {
  LOCKSTEP_ASSERT(model_ != nullptr);
  last_saved_ = std::pair{epoch, batch_in_epoch};
  model_->gather_optimizer_slots();  // every worker runs this callback (it restores on each)
  TrainingState state = make_training_state(*model_, epoch, batch_in_epoch);
  state.run_config = o_.run_config;
  manager_.save(model_->variables(), model_->optimizer().get(), state,
                {.is_chief = writes_files(o_.is_chief)});
}

void BackupAndRestore::on_train_end(const Logs&) {
  // Keras keeps the backup when training was interrupted; an exception skips this hook anyway.
  if (o_.delete_checkpoint && writes_files(o_.is_chief)) manager_.remove_all();
}

}  // namespace lockstep
