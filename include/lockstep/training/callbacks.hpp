#pragma once
// Keras' built-in callbacks, with Keras' defaults and semantics (keras.callbacks.*).
// "auto" mode means: maximise when the monitored name contains "acc" (or starts with
// "fmeasure"), minimise otherwise, as Keras decides.
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/io/event_file_writer.hpp"
#include "lockstep/training/callback.hpp"

namespace lockstep {

/// How often a callback saves or logs: every epoch, or every `batches` training batches.
struct SaveFreq {
  std::int64_t batches = 0;  // 0: at each epoch end
  static SaveFreq epoch() { return {}; }
  static SaveFreq every(std::int64_t n) { return {n}; }
};

/// How many batches an on_train_batch_end(last) closes: those since on_train_batch_begin(first),
/// several under steps_per_execution (Keras' callbacks count them so). Without a begin call,
/// those since the last end (a new epoch's batch 0 counts from 0).
class BatchSpan {
 public:
  void begin(std::int64_t first) { first_ = first; }
  std::int64_t end(std::int64_t last) {
    const std::int64_t n = last >= first_ ? last - first_ + 1 : last + 1;
    first_ = last + 1;
    return n;
  }

 private:
  std::int64_t first_ = 0;
};

struct ModelCheckpointOptions {
  /// Prefix template, Python format: "ckpt-{epoch:02d}-{val_loss:.2f}" (epoch is 1-based; batch
  /// too, when saving by batch). Each save writes <prefix>.safetensors and <prefix>.json; a
  /// trailing ".safetensors" on the template is dropped.
  std::string filepath;
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  bool save_weights_only = false;  // true: no optimizer slots
  std::string mode = "auto";       // auto | min | max
  SaveFreq save_freq;
  std::optional<double> initial_value_threshold;
  /// Whether this process writes (unset: the chief of the model's strategy, as Keras decides).
  std::optional<bool> is_chief;
};

class ModelCheckpoint final : public Callback {
 public:
  explicit ModelCheckpoint(ModelCheckpointOptions options);
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_train_batch_begin(std::int64_t batch, const Logs&) override { span_.begin(batch); }
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  /// A save every N batches must see the weights after exactly that batch: not async-safe.
  bool async_safe() const override { return o_.save_freq.batches <= 0; }
  /// Prefixes written so far, in order.
  const std::vector<std::string>& saved() const { return saved_; }
  double best() const { return best_; }

 private:
  void save(int epoch, std::optional<std::int64_t> batch, const Logs& logs);
  ModelCheckpointOptions o_;
  bool greater_;
  double best_;
  int epoch_ = 0;
  std::int64_t batches_since_save_ = 0;
  std::vector<std::string> saved_;
  BatchSpan span_;
};

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int patience = 0;
  int verbose = 0;
  std::string mode = "auto";
  std::optional<double> baseline;
  bool restore_best_weights = false;
  int start_from_epoch = 0;
};

class EarlyStopping final : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  bool async_safe() const override { return true; }  // epoch hooks only
  /// The epoch training stopped at (0 when it did not stop early), the best epoch and value.
  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }
  double best() const { return best_; }

 private:
  bool is_improvement(double value, double reference) const;
  EarlyStoppingOptions o_;
  bool greater_;
  double best_ = 0;
  int wait_ = 0;
  int stopped_epoch_ = 0;
  int best_epoch_ = 0;
  std::vector<Tensor> best_weights_;
};

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;
  int patience = 10;
  int verbose = 0;
  std::string mode = "auto";
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0.0;
};

class ReduceLROnPlateau final : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool async_safe() const override { return true; }  // epoch hooks only

 private:
  ReduceLROnPlateauOptions o_;
  bool greater_;
  double best_ = 0;
  int wait_ = 0;
  int cooldown_counter_ = 0;
};

/// Sets the learning rate at each epoch's start to schedule(epoch, current lr).
class LearningRateScheduler final : public Callback {
 public:
  using Schedule = std::function<double(int epoch, double lr)>;
  explicit LearningRateScheduler(Schedule schedule, int verbose = 0);
  void on_epoch_begin(int epoch, const Logs& logs) override;
  bool async_safe() const override { return true; }  // epoch hooks only

 private:
  Schedule schedule_;
  int verbose_;
};

/// Stops training at the first batch whose loss is NaN or infinite.
class TerminateOnNaN final : public Callback {
 public:
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  /// Async-safe: it still stops at the first non-finite batch it is shown, in order, and fit
  /// shows no callback a batch after that one; up to 15 later steps may already have run (fit
  /// defers the reads of at most 16), their weights past the divergence anyway. Were it not,
  /// fit could never defer its reads where the CLI trains (it installs one).
  bool async_safe() const override { return true; }
  /// Whether it stopped training, and where (epoch, batch: 0-based), so that a caller can report
  /// the divergence instead of treating the stopped run as finished.
  bool terminated() const { return terminated_; }
  int epoch() const { return epoch_; }
  std::int64_t batch() const { return batch_; }

 private:
  bool terminated_ = false;
  int epoch_ = 0;
  std::int64_t batch_ = 0;
};

struct CSVLoggerOptions {
  std::string filename;
  char separator = ',';
  bool append = false;
};

/// One row per epoch: "epoch" then the log keys in sorted order (fixed by the first epoch);
/// a key missing later is written as NA. Rows are flushed as they are written.
class CSVLogger final : public Callback {
 public:
  explicit CSVLogger(CSVLoggerOptions options);
  CSVLogger(std::string filename, char separator = ',', bool append = false)
      : CSVLogger(CSVLoggerOptions{std::move(filename), separator, append}) {}
  ~CSVLogger() override;
  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  bool async_safe() const override { return true; }  // one row per epoch

 private:
  CSVLoggerOptions o_;
  std::FILE* file_ = nullptr;
  bool write_header_ = true;
  std::vector<std::string> keys_;
};

/// Keras' LambdaCallback: any hook left empty does nothing.
struct LambdaCallbackOptions {
  std::function<void(int, const Logs&)> on_epoch_begin;
  std::function<void(int, const Logs&)> on_epoch_end;
  std::function<void(std::int64_t, const Logs&)> on_train_batch_begin;
  std::function<void(std::int64_t, const Logs&)> on_train_batch_end;
  std::function<void(const Logs&)> on_train_begin;
  std::function<void(const Logs&)> on_train_end;
};

class LambdaCallback final : public Callback {
 public:
  explicit LambdaCallback(LambdaCallbackOptions hooks) : h_(std::move(hooks)) {}
  void on_epoch_begin(int e, const Logs& l) override { if (h_.on_epoch_begin) h_.on_epoch_begin(e, l); }
  void on_epoch_end(int e, const Logs& l) override { if (h_.on_epoch_end) h_.on_epoch_end(e, l); }
  void on_train_batch_begin(std::int64_t b, const Logs& l) override { if (h_.on_train_batch_begin) h_.on_train_batch_begin(b, l); }
  void on_train_batch_end(std::int64_t b, const Logs& l) override { if (h_.on_train_batch_end) h_.on_train_batch_end(b, l); }
  void on_train_begin(const Logs& l) override { if (h_.on_train_begin) h_.on_train_begin(l); }
  void on_train_end(const Logs& l) override { if (h_.on_train_end) h_.on_train_end(l); }
  /// Only without batch hooks: a user's batch hook may read the model as of its own batch.
  bool async_safe() const override { return !h_.on_train_batch_begin && !h_.on_train_batch_end; }

 private:
  LambdaCallbackOptions h_;
};

struct TensorBoardOptions {
  std::string log_dir = "logs";
  /// Every this many epochs, a histogram of each variable ("dense/kernel_0", tf.keras' tag).
  int histogram_freq = 0;
  /// Scalars per epoch, or also "batch_<metric>" every N batches (step: the optimizer's
  /// host_iterations(), which reads nothing from a device).
  SaveFreq update_freq;
  /// The model's summary table as text (tag "model_summary", step 0) in log_dir/train.
  bool write_model_summary = true;
  /// Whether this process writes (unset: the chief of the model's strategy, as Keras decides).
  std::optional<bool> is_chief;
};

/// tf.keras' TensorBoard: log_dir/train gets epoch_<metric> (step: epoch) and
/// epoch_learning_rate; log_dir/validation gets epoch_<metric> for each val_<metric> and
/// evaluation_<metric>_vs_iterations (step: optimizer iterations).
class TensorBoard final : public Callback {
 public:
  explicit TensorBoard(TensorBoardOptions options = {});
  void on_train_begin(const Logs& logs) override;
  void on_train_batch_begin(std::int64_t batch, const Logs&) override { span_.begin(batch); }
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  /// Per epoch only: "batch_<metric>" every N batches is written at the optimizer's iterations
  /// when it is called, which must be that batch's.
  bool async_safe() const override { return o_.update_freq.batches <= 0; }

 private:
  io::EventFileWriter& validation_writer();
  TensorBoardOptions o_;
  std::unique_ptr<io::EventFileWriter> train_;
  std::unique_ptr<io::EventFileWriter> val_;
  std::int64_t batches_ = 0;
  BatchSpan span_;
};

struct BackupAndRestoreOptions {
  std::string backup_dir;
  /// At each epoch end, or also every N batches.
  SaveFreq save_freq;
  /// Remove the backup when training ends normally (Keras' delete_checkpoint).
  bool delete_checkpoint = true;
  /// Whether this process writes (unset: the chief of the model's strategy, as Keras decides).
  std::optional<bool> is_chief;
  /// The run's configuration (e.g. the CLI's flags), stored in every backup's TrainingState so
  /// that whoever resumes can check it is continuing the same run.
  std::map<std::string, std::string> run_config;
};

/// Saves a checkpoint with its TrainingState to backup_dir at each epoch end (and every N
/// batches when asked), through a CheckpointManager, so a crash always leaves a whole one.
/// At train begin it restores the latest backup into the model (weights, optimizer slots and
/// iterations, learning rate) and exposes the state; making fit() resume from that epoch and
/// batch is fit's job (see docs/ or the io branch report: fit must read restored_state()).
class BackupAndRestore final : public Callback {
 public:
  explicit BackupAndRestore(BackupAndRestoreOptions options);
  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int epoch, const Logs& logs) override;
  void on_train_batch_begin(std::int64_t batch, const Logs&) override { span_.begin(batch); }
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  /// A backup every N batches must hold the weights after exactly that batch: not async-safe.
  bool async_safe() const override { return o_.save_freq.batches <= 0; }
  /// The state restored at train begin (nullopt: no backup existed; training starts fresh).
  const std::optional<io::TrainingState>& restored_state() const { return restored_; }
  /// Restores the latest backup into the model now (builds nothing: the model must be built).
  std::optional<io::TrainingState> restore();
  /// A mid-epoch backup now, after `batch_in_epoch` batches of `epoch` (fit's stop at a step
  /// boundary, preemption.hpp); nothing when the last backup was made at that very place.
  void backup_now(int epoch, std::int64_t batch_in_epoch);
  const std::string& backup_dir() const { return o_.backup_dir; }

 private:
  void save(int epoch, std::int64_t batch_in_epoch);
  std::optional<std::pair<int, std::int64_t>> last_saved_;
  BackupAndRestoreOptions o_;
  io::CheckpointManager manager_;
  std::optional<io::TrainingState> restored_;
  int epoch_ = 0;
  std::int64_t batches_since_save_ = 0;
  BatchSpan span_;
};

}  // namespace lockstep
