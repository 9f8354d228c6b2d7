#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/io/checkpoint.hpp"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/crc32c.hpp"
#include "lockstep/io/file_name.hpp"

namespace lockstep::io {

namespace {
constexpr const char* kFormatName = "lockstep-checkpoint";

std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

nlohmann::json state_to_json(const TrainingState& s) {
  return {{"epoch", s.epoch},
          {"batch_in_epoch", s.batch_in_epoch},
          {"iterations", s.iterations},
          {"seed", s.seed},
          {"learning_rate", s.learning_rate},
          {"learning_rate_from_schedule", s.learning_rate_from_schedule},
          {"loss_scale", s.loss_scale},
          {"values", s.values},
          {"run_config", s.run_config}};
}

// Every field is range-checked: the record is CRC-covered, but a CRC only says the bytes are
// the ones written, and "iterations": -1 must not reach the optimizer even from a buggy writer.
TrainingState state_from_json(const nlohmann::json& j, const std::string& what) {
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 62;
  TrainingState s;
  s.epoch = static_cast<int>(detail::integer_field(j, "epoch", 0, std::numeric_limits<int>::max() - 1, what));
  s.batch_in_epoch = detail::integer_field(j, "batch_in_epoch", 0, kMaxCount, what);
  s.iterations = detail::integer_field(j, "iterations", 0, kMaxCount, what);
  s.seed = detail::unsigned_field(j, "seed", what);
  s.learning_rate = detail::number_field(j, "learning_rate", 0, std::numeric_limits<double>::max(), what);
  s.learning_rate_from_schedule = detail::bool_field(j, "learning_rate_from_schedule", what);
  s.loss_scale = detail::number_field(j, "loss_scale", std::numeric_limits<double>::min(),
                                      std::numeric_limits<double>::max(), what);
  const auto values = j.find("values");
  if (values == j.end() || !values->is_object()) throw IOError(what + ": \"values\" is missing or not an object");
  for (auto it = values->begin(); it != values->end(); ++it)
    s.values[it.key()] = detail::number_field(*values, it.key().c_str(), -std::numeric_limits<double>::max(),
                                              std::numeric_limits<double>::max(), what + " \"values\"");
  const auto config = j.find("run_config");
  if (config == j.end() || !config->is_object()) throw IOError(what + ": \"run_config\" is missing or not an object");
  for (auto it = config->begin(); it != config->end(); ++it)
    s.run_config[it.key()] = detail::string_field(*config, it.key().c_str(), what + " \"run_config\"");
  return s;
}

// The CRC of the whole record but its own field: nlohmann's objects are sorted maps and its
// numbers print in their shortest round-trip form, so a parsed record dumps to the same bytes.
std::string record_crc(nlohmann::json j) {
  j.erase("record_crc32c");
  return hex32(crc32c(j.dump()));
}

}  // namespace

std::string slot_tensor_name(const std::string& variable_name, const std::string& slot_name) {
  return "optimizer/" + variable_name + "/" + slot_name;
}

std::vector<std::pair<std::string, Tensor>> slots_to_save(optimizers::Optimizer& optimizer, const Variable& v) {
  auto slots = optimizer.slots(v);
  // Every live sharded update registers which slots it holds only in shards here.
  LOCKSTEP_CHECK(slots.empty() || !slots_held_in_shards(v), optimizer.name(),
                 ": the slots of variable '", v.name(), "' are sharded over the workers (the sharded optimizer update) "
                 "and this worker holds only its shards; call model.gather_optimizer_slots() on every worker before "
                 "saving them (fit does at every epoch's end, and BackupAndRestore before each backup)");
  return slots;
}

void save_checkpoint(const std::string& prefix, const std::vector<Variable>& variables,
                     optimizers::Optimizer* optimizer, const TrainingState& state_in, const CheckpointOptions& options) {
  if (!options.is_chief) return;
  TrainingState state = state_in;
  NamedTensors tensors;
  for (const auto& v : variables) {
    LOCKSTEP_CHECK(!v.name().empty(), "save_checkpoint: a variable has no name; checkpoints match variables by name");
    tensors.emplace_back(v.name(), v.read_value());
  }
  const bool with_optimizer = optimizer != nullptr && options.include_optimizer;
  if (with_optimizer) {
    for (const auto& v : variables)
      if (v.trainable())
        for (auto& [slot, t] : slots_to_save(*optimizer, v))
          tensors.emplace_back(slot_tensor_name(v.name(), slot), t);
    state.iterations = optimizer->iterations();
  }
  if (optimizer != nullptr) {
    state.learning_rate = optimizer->current_learning_rate();
    state.learning_rate_from_schedule = static_cast<bool>(optimizer->options().schedule);
  }
  const std::string bytes =
      encode_safetensors(tensors, {{"format", kFormatName}, {"format_version", std::to_string(kCheckpointFormatVersion)}});

  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, t] : tensors)
    list.push_back({{"name", name}, {"shape", t.shape().dims()}, {"dtype", safetensors_dtype(t.dtype())}});
  const std::string tensors_path = prefix + ".safetensors";
  nlohmann::json j = {{"format", kFormatName},
                      {"format_version", kCheckpointFormatVersion},
                      {"tensors_file", std::filesystem::path(tensors_path).filename().string()},
                      {"tensors_bytes", bytes.size()},
                      {"tensors_crc32c", hex32(crc32c(bytes))},
                      {"has_optimizer", with_optimizer},
                      {"optimizer", optimizer ? optimizer->name() : std::string()},
                      {"state", state_to_json(state)},
                      {"tensors", list}};
  j["record_crc32c"] = record_crc(j);
  const std::filesystem::path parent = std::filesystem::path(prefix).parent_path();
  if (!parent.empty()) make_directories(parent.string());
  write_file_atomic(tensors_path, bytes);
  write_file_atomic(prefix + ".json", j.dump(2) + "\n");
}

Checkpoint read_checkpoint(const std::string& prefix) {
  const std::string json_path = prefix + ".json";
  const std::string tensors_path = prefix + ".safetensors";
  const auto bad = [&](const std::string& what) -> IOError {
    return IOError("checkpoint '" + json_path + "': " + what);
  };
  const std::string what = "checkpoint '" + json_path + "'";
  const nlohmann::json j = detail::parse_json(read_file(json_path), what);
  if (!j.is_object() || j.value("format", std::string()) != kFormatName)
    throw bad(std::string("not a lockstep checkpoint record (no \"format\": \"") + kFormatName + "\")");
  // Any integer: a version from the future is named as such, not truncated to one we know.
  const auto version = j.contains("format_version") && j["format_version"].is_number_integer()
                           ? j["format_version"].dump()
                           : std::string("(missing or not an integer)");
  if (version != std::to_string(kCheckpointFormatVersion))
    throw bad("format version " + version + " is not the supported version " +
              std::to_string(kCheckpointFormatVersion));
  const std::string want_record_crc = detail::string_field(j, "record_crc32c", what);
  if (const std::string have = record_crc(j); have != want_record_crc)
    throw bad("the record's CRC-32C is " + have + " but it records " + want_record_crc +
              " (the record was edited or is corrupt)");
  Checkpoint ck;
  ck.state = state_from_json(j.value("state", nlohmann::json()), what + " \"state\"");
  ck.has_optimizer = detail::bool_field(j, "has_optimizer", what);
  ck.optimizer_name = detail::string_field(j, "optimizer", what);
  const auto want_bytes = static_cast<std::uint64_t>(
      detail::integer_field(j, "tensors_bytes", 8, std::numeric_limits<std::int64_t>::max(), what));
  const std::string want_crc = detail::string_field(j, "tensors_crc32c", what);
  // Not used to find the tensors (they are <prefix>.safetensors), but never a path elsewhere.
  (void)path_in_directory(".", detail::string_field(j, "tensors_file", what), what + " \"tensors_file\"");
  const auto listed_it = j.find("tensors");
  if (listed_it == j.end() || !listed_it->is_array()) throw bad("\"tensors\" is missing or not a list");
  const nlohmann::json& listed = *listed_it;
  const std::string bytes = read_file(tensors_path);
  if (bytes.size() != want_bytes)
    throw IOError("checkpoint '" + tensors_path + "' has " + std::to_string(bytes.size()) + " bytes but " + json_path +
                  " records " + std::to_string(want_bytes) + " (truncated, or a save was interrupted between the two files)");
  const std::string have_crc = hex32(crc32c(bytes));
  if (have_crc != want_crc)
    throw IOError("checkpoint '" + tensors_path + "' has CRC-32C " + have_crc + " but " + json_path + " records " +
                  want_crc + " (the file is corrupt, or a save was interrupted between the two files)");
  ck.tensors = decode_safetensors(bytes, tensors_path);
  if (listed.size() != ck.tensors.tensors.size())
    throw bad("lists " + std::to_string(listed.size()) + " tensors but " + tensors_path + " holds " +
              std::to_string(ck.tensors.tensors.size()));
  for (const auto& e : listed) {
    const auto name = detail::string_field(e, "name", what + " \"tensors\"");
    const Tensor* t = ck.tensors.find(name);
    if (t == nullptr) throw bad("lists tensor '" + name + "', which " + tensors_path + " lacks");
    if (!e.contains("shape") || e["shape"] != nlohmann::json(t->shape().dims()))
      throw bad("tensor '" + name + "' has shape " + t->shape().str() + " in " + tensors_path + " but " +
                e.value("shape", nlohmann::json::array()).dump() + " in the record");
  }
  return ck;
}

void assign_verified(const SafetensorsContent& content, const std::string& source,
                     const std::vector<Variable>& variables, optimizers::Optimizer* optimizer) {
  std::set<std::string> used;
  // Every check first; no assignment until all pass.
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  const auto take = [&](const std::string& name, const Tensor& dest, const char* what) {
    const Tensor* t = content.find(name);
    if (t == nullptr) throw IOError(source + " has no " + what + " '" + name + "'");
    if (t->shape() != dest.shape() || t->dtype() != dest.dtype())
      throw IOError(source + ": " + what + " '" + name + "' is " + t->shape().str() + " " + dtype_name(t->dtype()) +
                    " there but " + dest.shape().str() + " " + dtype_name(dest.dtype()) + " in the model");
    used.insert(name);
    copies.emplace_back(dest, *t);
  };
  for (const auto& v : variables) take(v.name(), v.value(), "variable");
  if (optimizer != nullptr)
    for (const auto& v : variables)
      if (v.trainable())
        for (auto& [slot, t] : optimizer->slots(v)) take(slot_tensor_name(v.name(), slot), t, "optimizer slot");
  std::vector<std::string> extra;
  for (const auto& [name, t] : content.tensors)
    if (!used.contains(name) && (optimizer != nullptr || name.rfind("optimizer/", 0) != 0)) extra.push_back(name);
  if (!extra.empty()) {
    std::string names;
    for (const auto& n : extra) names += (names.empty() ? "'" : ", '") + n + "'";
    throw IOError(source + " holds tensors the model does not have: " + names);
  }
  for (auto& [dest, src] : copies) dest.copy_from(src);
  // A mirrored variable was loaded into its primary copy: every replica gets the same values.
  for (auto v : variables)
    if (v.mirrored()) v.assign(v.copy(0));
  if (optimizer != nullptr)
    for (const auto& v : variables)
      if (v.trainable()) optimizer->broadcast_slots(v);
}

TrainingState load_checkpoint(const std::string& prefix, const std::vector<Variable>& variables,
                              optimizers::Optimizer* optimizer) {
  Checkpoint ck = read_checkpoint(prefix);
  const bool with_optimizer = optimizer != nullptr && ck.has_optimizer;
  assign_verified(ck.tensors, "checkpoint '" + prefix + ".safetensors'", variables,
                  with_optimizer ? optimizer : nullptr);
  if (with_optimizer) optimizer->set_iterations(ck.state.iterations);
  if (optimizer != nullptr && !ck.state.learning_rate_from_schedule && ck.state.learning_rate > 0)
    optimizer->set_learning_rate(ck.state.learning_rate);
  return ck.state;
}

}  // namespace lockstep::io
