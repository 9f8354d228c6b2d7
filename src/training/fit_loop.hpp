#pragma once
// The named parts of Model::fit (fit.cpp): where it starts (a resume plan), the passes it reads
// (EpochInput), and one epoch's training as groups of batches read and then run (FitLoop).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "lockstep/data/thread_budget.hpp"
#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/model.hpp"
#include "lockstep/training/preemption.hpp"
#include "training/gpu_utilization.hpp"
#include "training/replica_slices.hpp"

namespace lockstep::detail {

/// Where fit starts: initial_epoch, or the epoch and batch that a backup was made at.
struct ResumePoint {
  int epoch = 0;
  std::int64_t batch = 0;
  const io::TrainingState* state = nullptr;  // the restored backup's, when resuming
};

/// What training one epoch tallies for its logs.
struct EpochTally {
  std::int64_t steps = 0;
  double input_seconds = 0;  // spent waiting for input, so that an input-bound run shows itself
  bool ran_dry = false;      // steps_per_epoch is set and the input ended
  bool interrupted = false;  // a stop was requested (training::request_stop): stopped after `steps_done`
  std::int64_t steps_done = 0;
  std::optional<double> gpu_utilization;
  std::chrono::steady_clock::time_point start;
};

/// The passes over the dataset that fit reads. With steps_per_epoch, one iterator runs on across
/// epochs (Keras' EpochIterator). When the dataset's length is known, a pass that has been used
/// up is replaced by a fresh one at the next epoch's start, so steps_per_epoch = the dataset's
/// length is a fresh pass each epoch, and a pass that runs out within an epoch ends that epoch
/// early (with a warning) rather than training. Without steps_per_epoch each epoch is a pass.
class EpochInput {
 public:
  using Iterator = distribute::Strategy::DistributedIterator;
  using OpenPass = std::function<std::unique_ptr<Iterator>()>;
  /// Resuming at `at`: the shuffle order of a pass depends only on the seed and on how many
  /// passes came before, so the passes of the finished epochs are made (and dropped) again,
  /// then the batches already trained in the interrupted epoch are skipped.
  EpochInput(OpenPass open_pass, const FitOptions& o, std::int64_t cardinality, ResumePoint at);
  /// Before an epoch's first batch; `resumed`: the epoch a backup interrupted.
  void begin_epoch(bool resumed, std::int64_t first_step);
  /// The next batch, or none at the end of the pass (or where a known-length pass is used up).
  /// The batch after it is read ahead for the replicas to prepare during its step
  /// (DistributedIterator::next), unless it is `last_of_epoch` (validation comes first) or the
  /// pass's last.
  std::optional<distribute::DistributedBatch> next(bool last_of_epoch);
  bool used_up() const { return renew_ && taken_ >= card_; }
  bool renews() const { return renew_; }
  /// The pass ended within an epoch: the next epoch starts a fresh one.
  void end_pass() { taken_ = card_; }

 private:
  OpenPass open_pass_;
  std::int64_t card_;
  bool renew_;
  std::int64_t taken_ = 0;  // batches taken from persistent_'s pass
  std::unique_ptr<Iterator> persistent_;
  std::unique_ptr<Iterator> per_epoch_;
  Iterator* it_ = nullptr;
};

/// One fit call's state and its parts; Model::fit is the loop over epochs that calls them.
class FitLoop {
 public:
  /// Steps whose numbers may wait on the devices, unread, while every callback is async-safe
  /// (Callback::async_safe): a flagship step on an H200 takes tens of microseconds, so reading
  /// each one's numbers would leave the GPU idle while the host runs callbacks and queues the
  /// next. At most the step replays' spare copies of a step's numbers (StepReplays::kMaxSpares),
  /// each pending replayed step holding one: more would allocate a copy per step.
  static constexpr std::size_t kMaxPendingSteps = 16;

  /// Checks the options and sets up callbacks, the thread budget and the read-ahead switches.
  FitLoop(Model& model, const data::Dataset& dataset, const FitOptions& o);
  /// Where to start: checks a restored backup against this fit and takes its slots to every
  /// replica (and worker).
  ResumePoint resume();
  EpochInput open_input(ResumePoint at) const;
  EpochTally train_epoch(EpochInput& in, bool resumed, std::int64_t first_step);
  /// The epoch's logs: the metrics, throughput, memory, GPU use, loss scale and validation.
  Logs epoch_logs(const EpochTally& tally);
  /// After a stop request at a step boundary: the backup at that step (with BackupAndRestore,
  /// where the workers agreed on the step: training::agreed_stop), then training::Interrupted.
  [[noreturn]] void interrupt(int epoch, std::int64_t steps_done);

  CallbackList callbacks;
  Logs logs;
  History history;

 private:
  /// Reads the next group of batches (gradient accumulation: every batch's loss is divided by
  /// all the group's examples, a short last group included; without it a group is one batch).
  /// Returns false when the input ended.
  bool read_group(EpochInput& in, std::int64_t step, EpochTally& tally);
  /// One execution (Model::steps_per_execution): up to N steps from `step` (fewer at the epoch's
  /// or the input's end), groups read as their first batch is due, so a group may span
  /// executions; the batch begin callbacks fire once before it, its losses and metrics are read
  /// and its batch end callbacks fire once at its end, or later with others' (read_pending).
  /// Returns false when the input ended (nothing ran: no callbacks either).
  bool run_execution(EpochInput& in, std::int64_t& step, EpochTally& tally, GpuUtilization& utilization);
  /// Reads the numbers of the executions run since the last read (one reduction and host read),
  /// merges them into the trackers execution by execution and calls each one's batch end with
  /// its own logs, in order; none after a batch end that stopped training (the later steps'
  /// numbers are merged still: they changed the weights).
  void read_pending();
  /// At a step boundary: a stop that every worker agrees on (training::agreed_stop), asked of
  /// them every few boundaries only.
  std::optional<training::AgreedStop> poll_stop();
  /// The devices, the thread budget, and how batches are read: row batches gathered by the
  /// replicas, elements read ahead for GPUs, and whether the next batch is prepared ahead.
  void choose_input();
  void take_restored_slots();
  /// Drops the gradients of a group that will not be applied (training stopped within it).
  void drop_held_back();
  void update_timing();
  void add_device_logs(Logs& out) const;

  Model& model_;
  const data::Dataset& dataset_;
  const FitOptions& o_;
  std::int64_t card_;
  std::int64_t steps_;  // per epoch; -1: until the pass ends
  int verbose_;
  BackupAndRestore* backup_ = nullptr;
  training::AgreedStop stop_;  // what train_epoch stopped on
  std::int64_t boundaries_ = 0;  // step boundaries this fit passed (under several workers)
  // The contexts training computes on: the replicas', or the current one without a strategy.
  std::vector<ComputeContext*> devices_;
  data::ThreadBudget::Lease compute_lease_;
  bool on_gpus_ = false;
  bool gather_in_replicas_ = false;
  bool read_ahead_ = true;
  // Throughput is timed after the first 5% of all steps (warm-up: caches, allocator).
  std::int64_t warmup_ = 1;
  std::int64_t global_step_ = 0;
  std::chrono::steady_clock::time_point timed_start_;
  // The batch callbacks' logs, refreshed in place each execution (the same names all fit long).
  Logs batch_logs_;
  // The accumulation group being run: its batches, the next one's index, its examples, the
  // first example of the next batch within it; and whether this epoch's input ended.
  std::vector<distribute::DistributedBatch> group_;
  std::size_t group_at_ = 0;
  std::int64_t group_examples_ = 0;
  std::int64_t first_example_ = 0;
  bool input_ended_ = false;
  detail::PendingNumbers pending_;  // the numbers of the executions run since the last read
  // Each of those executions: where its steps end in pending_.steps, and its last batch.
  struct PendingExecution {
    std::size_t steps_end;
    std::int64_t last_batch;
  };
  std::vector<PendingExecution> executions_;
  // Whether executions' numbers wait to be read together (every callback async-safe, one worker).
  bool defer_reads_ = false;
};

}  // namespace lockstep::detail
