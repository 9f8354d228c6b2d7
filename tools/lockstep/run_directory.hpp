#pragma once
// What `lockstep train` checks before it trains into a run directory: that a resumed run is the
// same run (its flags are stored with every backup and compared), and (run_directory.cpp) that
// the directory is not in use.
#include <cstdint>
#include <map>
#include <string>

#include "commands.hpp"

namespace lockstep::cli {

using RunConfig = std::map<std::string, std::string>;

/// The flags that define a run, by flag name. The batch is the global one (--batch-size x
/// replicas, or --global-batch-size), since that is what the data order and the updates depend on.
RunConfig make_run_config(const TrainArgs& args, std::int64_t global_batch);

/// `config` with what a backup also records beyond the flags: the data's fingerprint
/// (`data_signature`: the same --data path may hold other contents by now) and the device
/// layout. Continuing on other data or devices is sound (the same global batch and steps), so
/// check_resume says so in one line instead of refusing.
RunConfig with_run_context(RunConfig config, const std::string& data_signature, const std::string& devices);

/// For --resume: the latest backup in `backup_dir` must exist (a pointer listing none is an
/// error, not a fresh start) and must have been made with `now`'s flags. ValueError names every
/// flag that differs; a different --epochs is allowed and said on stdout (fit refuses fewer
/// epochs than the backup has finished), as is other data or another device layout
/// (with_run_context; a backup that did not record them is not compared on them).
void check_resume(const std::string& backup_dir, const RunConfig& now);

/// Removes the temporary files that killed runs left where `lockstep train` writes: in `logdir`
/// itself only lockstep's own (<name>.lockstep-tmp.<pid>), in its backup/, best/ and model/
/// folders also the older <name>.tmp.<pid>. Nothing below, nothing through a symlink (a
/// symlinked folder is skipped). Returns how many files were removed.
int remove_stale_run_temporaries(const std::string& logdir);

}  // namespace lockstep::cli
