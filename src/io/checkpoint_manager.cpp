#include "lockstep/io/checkpoint_manager.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/file_name.hpp"

namespace lockstep::io {

namespace fs = std::filesystem;

namespace {
std::string pointer_path(const std::string& dir) { return (fs::path(dir) / "checkpoint").string(); }
void remove_pair(const std::string& prefix) {
  std::error_code ec;
  fs::remove(prefix + ".json", ec);  // the record first: a prefix without it is never loaded
  fs::remove(prefix + ".safetensors", ec);
}
}  // namespace

CheckpointManager::CheckpointManager(std::string directory, CheckpointManagerOptions options)
    : directory_(std::move(directory)), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.max_to_keep >= 0, "CheckpointManager: max_to_keep must be >= 0, got ", options_.max_to_keep);
  const std::string p = pointer_path(directory_);
  if (!fs::exists(p)) return;
  const std::string source = "checkpoint pointer file '" + p + "'";
  const auto j = detail::parse_json(read_file(p), source);
  try {
    kept_ = j.at("all").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw IOError(source + " is malformed: " + e.what());
  }
  const std::string latest = detail::string_field(j, "latest", source);
  next_number_ = detail::integer_field(j, "next_number", 1, std::int64_t{1} << 53, source);
  // Every name is checked before any is used: clean-up deletes <dir>/<name>.* for old ones.
  for (const auto& name : kept_) (void)path_in_directory(directory_, name, source);
  if (latest != (kept_.empty() ? std::string() : kept_.back()))
    throw IOError(source + " is malformed: \"latest\" is '" + latest + "' but the last of \"all\" is '" +
                  (kept_.empty() ? std::string() : kept_.back()) + "'");
}

std::string CheckpointManager::save(const std::vector<Variable>& variables, optimizers::Optimizer* optimizer,
                                    const TrainingState& state, const CheckpointOptions& options) {
  if (!options_.is_chief || !options.is_chief) return {};
  make_directories(directory_);
  const std::string name = options_.name + "-" + std::to_string(next_number_);
  const std::string prefix = (fs::path(directory_) / name).string();
  save_checkpoint(prefix, variables, optimizer, state, options);
  ++next_number_;
  kept_.push_back(name);
  std::vector<std::string> doomed;
  while (options_.max_to_keep > 0 && kept_.size() > static_cast<std::size_t>(options_.max_to_keep)) {
    doomed.push_back(kept_.front());
    kept_.erase(kept_.begin());
  }
  write_pointer();  // only now is the new checkpoint the latest; then the old ones can go
  for (const auto& d : doomed) remove_pair((fs::path(directory_) / d).string());
  return prefix;
}

void CheckpointManager::write_pointer() const {
  const nlohmann::json j = {{"latest", kept_.empty() ? std::string() : kept_.back()},
                            {"all", kept_},
                            {"next_number", next_number_}};
  write_file_atomic(pointer_path(directory_), j.dump(2) + "\n");
}

std::optional<std::string> CheckpointManager::latest() const {
  if (kept_.empty()) return std::nullopt;
  return (fs::path(directory_) / kept_.back()).string();
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> out;
  for (const auto& k : kept_) out.push_back((fs::path(directory_) / k).string());
  return out;
}

void CheckpointManager::remove_all() {
  if (!options_.is_chief) return;
  std::error_code ec;
  fs::remove(pointer_path(directory_), ec);
  for (const auto& k : kept_) remove_pair((fs::path(directory_) / k).string());
  kept_.clear();
}

}  // namespace lockstep::io
