#pragma once
// `lockstep train` under mpirun: the workers agree on the whole run at start-up (the flags that
// define it and a fingerprint of the data), so that a worker started with other flags or other
// data stops the job, naming the flag and the workers, instead of training a mixed model.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/distribute/strategy.hpp"
#include "run_directory.hpp"

namespace lockstep::cli {

/// Made once the strategy is (its set-up is every worker's first exchange; a worker failing
/// before it has not started MPI, and mpirun stops the job at once), before the start-up checks
/// of one worker's own inputs (its data, its files, the chief's run directory).
class WorkerAgreement {
 public:
  explicit WorkerAgreement(const distribute::Strategy& strategy);
  /// Every worker's run configuration (make_run_config of `args`, and --model, --num-classes,
  /// --backup-every-steps) and its data's fingerprint (data::detail::tensors_signature: shapes,
  /// dtypes and bytes) compared:
  /// ValueError on every worker naming each flag that differs and which worker has which value;
  /// DistributedError where another worker failed its start-up checks. On one worker it does
  /// nothing.
  void agree(const TrainArgs& args, std::int64_t global_batch, const std::string& data_signature);
  /// After agree(), once this worker's remaining start-up checks passed (the chief's run
  /// directory): DistributedError where another worker's failed.
  void ready();
  /// ready() passed: every worker is past its start-up, and an error now is announced to the
  /// others (Strategy::announce_failure) rather than exchanged here.
  bool settled() const { return settled_; }
  /// A start-up check that threw on this worker before agree() or between agree() and ready():
  /// the worker still takes part in the exchange the others wait in, with a record saying it
  /// failed, so that they stop now instead of waiting for it the whole collective timeout.
  /// Never throws.
  ~WorkerAgreement();
  WorkerAgreement(const WorkerAgreement&) = delete;
  WorkerAgreement& operator=(const WorkerAgreement&) = delete;

 private:
  std::vector<std::optional<RunConfig>> exchange(const RunConfig& config);
  const distribute::Strategy& strategy_;
  int exceptions_;
  bool stop_ = false;  // no exchange is left that the others would wait in
  bool settled_ = false;
};

/// The workers' records (`configs[w]`: worker w's; nullopt: worker w failed at start-up),
/// checked as agree() does.
void check_workers_agree(const std::vector<std::optional<RunConfig>>& configs);

}  // namespace lockstep::cli
