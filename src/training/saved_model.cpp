#include "lockstep/training/saved_model.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/io/crc32c.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/optimizers/optimizer_config.hpp"
#include "training/compile_config.hpp"
#include "training/functional_config.hpp"
#include "training/keras_file.hpp"
#include "training/layer_config.hpp"

namespace lockstep {

namespace {
using nlohmann::json;
using detail::layer_from_json;
using detail::loss_from_json;
using detail::layer_to_json;
using detail::shape_from_json;
using detail::shape_to_json;

constexpr const char* kFormatName = "lockstep-saved-model";
constexpr const char* kModelFile = "model.json";
constexpr const char* kWeightsFile = "weights.safetensors";
std::string hex32(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

std::string join_path(const std::string& dir, const char* file) {
  return (std::filesystem::path(dir) / file).string();
}

// A Sequential or a Functional, built.
const Model& built_model(const Model& model, const char* who) {
  LOCKSTEP_CHECK(dynamic_cast<const Sequential*>(&model) != nullptr || dynamic_cast<const Functional*>(&model) != nullptr,
                 who, ": model '", model.name(),
                 "' is neither a Sequential nor a Functional; saved models describe those two classes only");
  LOCKSTEP_CHECK(model.built(), who, ": model '", model.name(),
                 "' is not built, so it has no weights yet (give the first layer an input_dim, or call build())");
  return model;
}

// The architecture as Keras' get_config() writes it, with layer_config.cpp's layers.
json architecture(const Model& model) {
  if (const auto* f = dynamic_cast<const Functional*>(&model))
    return {{"class_name", "Functional"}, {"config", detail::functional_config(*f, [](const layers::Layer& l) {
               return layer_to_json(l);
             })}};
  const auto* seq = dynamic_cast<const Sequential*>(&built_model(model, "save_model"));
  json layer_list = json::array();
  for (const auto& l : seq->layers()) layer_list.push_back(layer_to_json(*l));
  return {{"class_name", "Sequential"},
          {"config",
           {{"name", model.name()},
            {"build_input_shape", shape_to_json(seq->layers().front()->input_shape())},
            {"layers", layer_list}}}};
}

// Problems with model.json's content surface as IOError naming the file: the file is what the
// user has to fix, whichever part of lockstep noticed.
template <typename F>
decltype(auto) parse_part(const std::string& json_path, const std::string& what, F&& f) {
  try {
    return f();
  } catch (const json::exception& e) {
    throw IOError("saved model '" + json_path + "': " + what + ": missing or mistyped field (" + e.what() + ")");
  } catch (const Error& e) {
    throw IOError("saved model '" + json_path + "': " + what + ": " + e.what());
  }
}
}  // namespace

void save_model(Model& model, const std::string& dir, const SaveModelOptions& options) {
  if (detail::is_keras_archive_path(dir)) {
    return detail::save_keras_archive(built_model(model, "save_model"), dir, options.include_optimizer);
  }
  // Describe everything before writing anything, so an unsupported layer leaves no files behind.
  const json arch = architecture(model);

  io::NamedTensors tensors;
  for (const auto& v : model.variables()) {
    LOCKSTEP_CHECK(!v.name().empty(), "save_model: a variable has no name; saved weights are matched by name");
    tensors.emplace_back(v.name(), v.read_value());
  }
  auto* opt = model.optimizer().get();
  const bool with_optimizer = opt != nullptr && options.include_optimizer;
  if (with_optimizer)
    for (const auto& v : model.variables())
      if (v.trainable())
        for (auto& [slot, t] : io::slots_to_save(*opt, v))
          tensors.emplace_back(io::slot_tensor_name(v.name(), slot), t);
  const std::string bytes = io::encode_safetensors(
      tensors, {{"format", kFormatName}, {"format_version", std::to_string(kSavedModelFormatVersion)}});

  json weights = json::array();
  for (const auto& [name, t] : tensors)
    weights.push_back({{"name", name}, {"shape", t.shape().dims()}, {"dtype", dtype_name(t.dtype())}});
  json j = {{"format", kFormatName},
            {"format_version", kSavedModelFormatVersion},
            {"model", arch},
            {"seed", model.seed()},
            {"weights_file", kWeightsFile},
            {"weights_bytes", bytes.size()},
            {"weights_crc32c", hex32(io::crc32c(bytes))},
            {"weights", weights}};
  if (opt != nullptr) {
    const auto& loss = *model.loss();
    // Names, or Keras' objects for what a name does not make (k=3); weighted_metrics apart.
    j["compile_config"] = {
        {"optimizer", optimizers::serialize(*opt)},
        {"loss", {{"class_name", loss.name()}, {"config", {{"from_logits", loss.from_logits()}}}}},
        {"metrics", model.output_losses().empty() ? detail::metric_identifiers(model, 0, false) : json::array()},
        {"weighted_metrics", model.output_losses().empty() ? detail::metric_identifiers(model, 0, true) : json::array()},
        {"include_optimizer", with_optimizer},
        {"iterations", with_optimizer ? opt->iterations() : 0}};
    // A model of several outputs: each output's loss, weight and metrics (named unprefixed).
    json outputs = json::array();
    for (std::size_t k = 0; k < model.output_losses().size(); ++k) {
      const auto& head = model.output_losses()[k];
      outputs.push_back({{"name", head.name},
                         {"loss", {{"class_name", head.loss->name()}, {"config", {{"from_logits", head.loss->from_logits()}}}}},
                         {"weight", head.weight},
                         {"metrics", detail::metric_identifiers(model, k, false)},
                         {"weighted_metrics", detail::metric_identifiers(model, k, true)}});
    }
    if (!outputs.empty()) j["compile_config"]["outputs"] = outputs;
  }
  io::make_directories(dir);
  io::write_file_atomic(join_path(dir, kWeightsFile), bytes);
  io::write_file_atomic(join_path(dir, kModelFile), j.dump(2) + "\n");
}

std::unique_ptr<Model> load_model(const std::string& dir, const LoadModelOptions& options) {
  if (detail::is_keras_archive_path(dir)) return detail::load_keras_archive(dir, options.compile);
  LOCKSTEP_CHECK_T(IOError, std::filesystem::is_directory(dir), "load_model: saved model folder '", dir,
                   "' does not exist or is not a folder");
  const std::string json_path = join_path(dir, kModelFile);
  const std::string weights_path = join_path(dir, kWeightsFile);
  const auto bad = [&](const std::string& what) { return IOError("saved model '" + json_path + "': " + what); };
  const json j = io::detail::parse_json(io::read_file(json_path), "saved model '" + json_path + "'");
  if (!j.is_object() || j.value("format", std::string()) != kFormatName)
    throw bad(std::string("not a lockstep saved model (no \"format\": \"") + kFormatName + "\")");
  // Compared as written: get<int>() would read 4294967297 as 1, and 1.5 as 1.
  const json& version = j.value("format_version", json());
  if (!version.is_number_integer() || version.dump() != std::to_string(kSavedModelFormatVersion))
    throw bad("format version " + version.dump() + " is not the supported version " +
              std::to_string(kSavedModelFormatVersion));

  // The weights first: a model.json whose weights are truncated or from another save is refused
  // before anything is built.
  const auto [want_bytes, want_crc, listed] = parse_part(json_path, "weights record", [&] {
    return std::tuple(j.at("weights_bytes").get<std::uint64_t>(), j.at("weights_crc32c").get<std::string>(),
                      j.at("weights").get<std::vector<json>>());
  });
  const std::string bytes = io::read_file(weights_path);
  if (bytes.size() != want_bytes)
    throw IOError("saved model weights '" + weights_path + "' have " + std::to_string(bytes.size()) + " bytes but " +
                  json_path + " records " + std::to_string(want_bytes) +
                  " (truncated, or a save was interrupted between the two files)");
  if (const std::string have_crc = hex32(io::crc32c(bytes)); have_crc != want_crc)
    throw IOError("saved model weights '" + weights_path + "' have CRC-32C " + have_crc + " but " + json_path +
                  " records " + want_crc + " (the file is corrupt, or a save was interrupted between the two files)");
  const io::SafetensorsContent content = io::decode_safetensors(bytes, weights_path);
  if (listed.size() != content.tensors.size())
    throw bad("lists " + std::to_string(listed.size()) + " tensors but " + weights_path + " holds " +
              std::to_string(content.tensors.size()));
  for (const auto& e : listed) {
    const auto name = e.value("name", std::string());
    const Tensor* t = content.find(name);
    if (t == nullptr) throw bad("lists tensor '" + name + "', which " + weights_path + " lacks");
    if (e.value("shape", std::vector<std::int64_t>{}) != t->shape().dims())
      throw bad("tensor '" + name + "' has shape " + t->shape().str() + " in " + weights_path + " but " +
                e.value("shape", json::array()).dump() + " in " + kModelFile);
  }

  const auto [cls, arch] = parse_part(json_path, "model", [&] {
    const json& m = j.at("model");
    const auto c = m.at("class_name").get<std::string>();
    if (c != "Sequential" && c != "Functional")
      throw IOError("model class_name '" + c + "' is not Sequential or Functional, the model classes saved models hold");
    return std::pair<std::string, const json&>(c, m.at("config"));
  });
  std::unique_ptr<Model> model;
  if (cls == "Functional") {
    const auto seed = parse_part(json_path, "seed", [&] { return j.at("seed").get<std::uint64_t>(); });
    model = detail::functional_from_config(
        arch, [&](const json& entry) { return parse_part(json_path, "layer", [&] { return layer_from_json(entry); }); },
        seed, "saved model '" + json_path + "'");
  } else {
    auto seq = parse_part(json_path, "model", [&] {
      auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{}, arch.at("name").get<std::string>());
      m->set_seed(j.at("seed").get<std::uint64_t>());
      return m;
    });
    const auto& layer_list = parse_part(json_path, "model", [&]() -> const json& {
      const json& l = arch.at("layers");
      if (!l.is_array() || l.empty()) throw IOError("\"layers\" must be a non-empty list");
      return l;
    });
    for (std::size_t i = 0; i < layer_list.size(); ++i)
      parse_part(json_path, "layer " + std::to_string(i), [&] { seq->add(layer_from_json(layer_list[i])); });
    parse_part(json_path, "build_input_shape", [&] { seq->build(shape_from_json(arch.at("build_input_shape"))); });
    model = std::move(seq);
  }

  optimizers::Optimizer* restore_optimizer = nullptr;
  std::int64_t iterations = 0;
  if (options.compile && j.contains("compile_config")) {
    parse_part(json_path, "compile_config", [&] {
      const json& c = j.at("compile_config");
      detail::CompileParts parts;
      parts.optimizer = optimizers::deserialize(c.at("optimizer"));
      const auto listed = [](const json& o, const char* key) {  // (files before weighted metrics have none)
        return o.value(key, json::array()).get<std::vector<json>>();
      };
      if (c.contains("outputs")) {
        for (const auto& o : c.at("outputs")) {
          const auto name = o.at("name").get<std::string>();
          parts.losses[name] = o.at("loss");
          parts.loss_weights[name] = o.at("weight").get<double>();
          parts.output_metrics[name] = o.at("metrics").get<std::vector<json>>();
          parts.output_weighted_metrics[name] = listed(o, "weighted_metrics");
        }
      } else {
        parts.loss = c.at("loss");
        parts.metrics = c.at("metrics").get<std::vector<json>>();
        parts.weighted_metrics = listed(c, "weighted_metrics");
      }
      detail::compile_from_parts(*model, parts);
      if (c.at("include_optimizer").get<bool>()) restore_optimizer = model->optimizer().get();
      iterations = c.at("iterations").get<std::int64_t>();
    });
  }
  io::assign_verified(content, "saved model weights '" + weights_path + "'", model->variables(), restore_optimizer);
  if (restore_optimizer != nullptr) restore_optimizer->set_iterations(iterations);
  return model;
}

bool is_keras_file(const std::string& path) { return detail::is_keras_archive_path(path); }

void save_weights(const Model& model, const std::string& path) {
  LOCKSTEP_CHECK(detail::is_keras_weights_path(path), "save_weights: '", path,
                 "' must end in .weights.h5 (Keras' rule for weights files)");
  const std::string bytes = detail::encode_keras_weights(built_model(model, "save_weights"));
  io::write_file_atomic(path, bytes);
}

void load_weights(Model& model, const std::string& path) {
  LOCKSTEP_CHECK(detail::is_keras_weights_path(path), "load_weights: '", path,
                 "' must end in .weights.h5 (Keras' rule for weights files)");
  built_model(model, "load_weights");
  detail::assign_keras_weights(io::read_file(path), "Keras weights file '" + path + "'", model);
}

}  // namespace lockstep
