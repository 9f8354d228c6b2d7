#include "run_directory.hpp"

#include <cstdio>
#include <filesystem>

#include "lockstep/core/error.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint_manager.hpp"

namespace lockstep::cli {

namespace {
// Continuing for more (or fewer) epochs is meaningful; every other flag changes the run.
constexpr const char* kMayChange = "--epochs";
// What with_run_context records: said when it differs, never refused.
constexpr const char* kDataKey = "the data";
constexpr const char* kDevicesKey = "the devices";

std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace

RunConfig make_run_config(const TrainArgs& a, std::int64_t global_batch) {
  RunConfig config{{"--dataset", a.dataset},
          {"--epochs", std::to_string(a.epochs)},
          {"--steps-per-epoch", a.steps_per_epoch > 0 ? std::to_string(a.steps_per_epoch) : "one pass"},
          {"--batch-size", "global batch " + std::to_string(global_batch)},
          {"--optimizer", a.optimizer},
          {"--learning-rate", exact(a.learning_rate)},
          {"--hidden", std::to_string(a.hidden)},
          {"--activation", a.activation},
          {"--dropout", exact(a.dropout)},
          {"--seed", std::to_string(a.seed)},
          {"--policy", a.policy},
          {"--gradient-accumulation-steps", std::to_string(a.gradient_accumulation_steps)},
          {"--lr-schedule", a.lr_schedule},
          {"--warmup-epochs", exact(a.warmup_epochs)},
          {"--lr-scaling", a.lr_scaling == "linear" ? "linear from base batch " + std::to_string(a.lr_base_batch) : "none"}};
  // Recorded only for other models, so that runs made before --model existed still resume.
  if (a.model != "mlp") config["--model"] = a.model;
  if (!a.data.empty()) config["--data"] = a.data;
  if (!a.loss.empty()) config["--loss"] = a.loss;
  if (a.model == "gpt") config["--sequence-length"] = std::to_string(a.sequence_length);
  for (const auto& [flag, value] : {std::pair<const char*, std::int64_t>{"--patch", a.patch}, {"--dim", a.dim},
                                    {"--heads", a.heads}, {"--depth", a.depth}, {"--mlp", a.mlp}})
    if (value > 0) config[flag] = std::to_string(value);  // the transformers' sizes, where given
  return config;
}

RunConfig with_run_context(RunConfig config, const std::string& data_signature, const std::string& devices) {
  config[kDataKey] = data_signature;
  config[kDevicesKey] = devices;
  return config;
}

void check_resume(const std::string& backup_dir, const RunConfig& now) {
  const io::CheckpointManager manager(backup_dir);
  const auto latest = manager.latest();
  LOCKSTEP_CHECK_T(IOError, latest.has_value(), "--resume: '", backup_dir,
                   "/checkpoint' lists no backup, so there is nothing to continue (run without --resume to start a "
                   "new run in another --logdir)");
  const RunConfig then = io::read_checkpoint(*latest).state.run_config;
  LOCKSTEP_CHECK_T(IOError, !then.empty(), "--resume: backup '", *latest,
                   "' records no run configuration (it was not made by `lockstep train`), so it cannot be checked");
  std::string differences;
  std::string context;  // other data, other devices: one line
  for (const auto& [flag, value] : now) {
    const auto it = then.find(flag);
    const bool noted = flag == kDataKey || flag == kDevicesKey;
    if (noted && (it == then.end() || it->second == value)) continue;
    if (noted) {
      const auto data_path = now.find("--data");
      context += std::string(context.empty() ? "" : "; ") +
                 (flag == kDataKey ? (data_path == now.end() ? std::string("the data's contents differ from the run's")
                                                             : "--data '" + data_path->second +
                                                                   "' holds other contents than when the run started")
                                   : "the devices are " + value + " (the run was on " + it->second + ")");
      continue;
    }
    const std::string old = it == then.end() ? std::string("(not recorded)") : it->second;
    if (old == value) continue;
    if (flag == kMayChange) {
      std::printf("Resuming with %s %s (the run was started with %s %s)\n", flag.c_str(), value.c_str(), flag.c_str(),
                  old.c_str());
      continue;
    }
    differences += (differences.empty() ? "" : ", ") + flag + " " + old + " (now " + value + ")";
  }
  LOCKSTEP_CHECK(differences.empty(), "--resume: the run in '", backup_dir,
                 "' was made with other flags: ", differences,
                 "; resume with the run's own flags, or start a new run in another --logdir");
  if (!context.empty())
    std::printf("Resuming on other inputs: %s; the run continues with the same global batch and steps\n",
                context.c_str());
}

int remove_stale_run_temporaries(const std::string& logdir) {
  int removed = io::remove_stale_temporaries(logdir);
  for (const char* sub : {"backup", "best", "model"}) {
    const std::string dir = logdir + "/" + sub;
    std::error_code ec;
    if (std::filesystem::symlink_status(dir, ec).type() == std::filesystem::file_type::directory)
      removed += io::remove_stale_temporaries(dir, /*old_names=*/true);
  }
  return removed;
}

}  // namespace lockstep::cli
