#include "lockstep/io/checkpoint.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/crc32c.hpp"

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
          {"values", s.values}};
}

TrainingState state_from_json(const nlohmann::json& j) {
  TrainingState s;
  s.epoch = j.at("epoch").get<int>();
  s.batch_in_epoch = j.at("batch_in_epoch").get<std::int64_t>();
  s.iterations = j.at("iterations").get<std::int64_t>();
  s.seed = j.at("seed").get<std::uint64_t>();
  s.learning_rate = j.at("learning_rate").get<double>();
  s.learning_rate_from_schedule = j.at("learning_rate_from_schedule").get<bool>();
  s.loss_scale = j.at("loss_scale").get<double>();
  s.values = j.at("values").get<std::map<std::string, double>>();
  return s;
}

}  // namespace

std::string slot_tensor_name(const std::string& variable_name, const std::string& slot_name) {
  return "optimizer/" + variable_name + "/" + slot_name;
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
        for (auto& [slot, t] : optimizer->slots(v)) tensors.emplace_back(slot_tensor_name(v.name(), slot), t);
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
  const nlohmann::json j = detail::parse_json(read_file(json_path), "checkpoint '" + json_path + "'");
  if (!j.is_object() || j.value("format", std::string()) != kFormatName)
    throw bad(std::string("not a lockstep checkpoint record (no \"format\": \"") + kFormatName + "\")");
  const auto version = j.value("format_version", -1);
  if (version != kCheckpointFormatVersion)
    throw bad("format version " + std::to_string(version) + " is not the supported version " +
              std::to_string(kCheckpointFormatVersion));
  Checkpoint ck;
  std::vector<nlohmann::json> listed;
  std::uint64_t want_bytes = 0;
  std::string want_crc;
  try {
    ck.state = state_from_json(j.at("state"));
    ck.has_optimizer = j.at("has_optimizer").get<bool>();
    ck.optimizer_name = j.at("optimizer").get<std::string>();
    want_bytes = j.at("tensors_bytes").get<std::uint64_t>();
    want_crc = j.at("tensors_crc32c").get<std::string>();
    listed = j.at("tensors").get<std::vector<nlohmann::json>>();
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("missing or mistyped field: ") + e.what());
  }
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
    const auto name = e.value("name", std::string());
    const Tensor* t = ck.tensors.find(name);
    if (t == nullptr) throw bad("lists tensor '" + name + "', which " + tensors_path + " lacks");
    if (e.value("shape", std::vector<std::int64_t>{}) != t->shape().dims())
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
