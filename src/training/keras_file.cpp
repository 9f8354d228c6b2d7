#include "training/keras_file.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/training/sequential.hpp"
#include "nn/weight_check.hpp"
#include "training/keras_config.hpp"
#include "training/keras_optimizer_variables.hpp"
#include "training/layer_config.hpp"

namespace lockstep::detail {

namespace {
constexpr const char* kConfigEntry = "config.json";
constexpr const char* kMetadataEntry = "metadata.json";
constexpr const char* kWeightsEntry = "model.weights.h5";
// The Keras release whose files these were checked against (tests/reference/keras_files.py).
constexpr const char* kKerasVersion = "3.15.1";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The layers that own a weights group, each with its group: model.layers() in order, but for a
// Sequential's InputLayer (which Keras does not count as a layer of a Sequential; a Functional's
// is). Keras names the groups not by layer name
// (names are often generated, so not reproducible) but by class, numbered within the model:
// layers/dense, layers/dense_1, layers/conv2d, ... (saving_lib's _save_container_state).
struct WeightLayer {
  const layers::Layer* layer;
  std::string group;  // "layers/dense_1" (its weights: keras_weight_path under it)
};
// "layers/dense", then "layers/dense_1", ... within one model.
std::string numbered_group(const std::string& class_name, std::map<std::string, int>& used) {
  const std::string base = snake_case(class_name);
  const auto [it, fresh] = used.try_emplace(base, 0);
  return "layers/" + (fresh ? base : base + "_" + std::to_string(++it->second));
}

std::vector<WeightLayer> weight_layers(const Model& model) {
  std::vector<WeightLayer> out;
  std::map<std::string, int> used;
  const bool sequential = dynamic_cast<const Sequential*>(&model) != nullptr;
  for (const auto& l : model.layers()) {
    if (sequential && dynamic_cast<const layers::InputLayer*>(l.get()) != nullptr) continue;
    out.push_back({l.get(), numbered_group(l->class_name(), used)});
  }
  return out;
}

// The same for the layers as a file listed them, a nested model's under its own group (its
// InputLayers, which hold no weights, counted but not returned).
void weight_layers(const KerasLayerTree& tree, const std::string& prefix, std::vector<WeightLayer>& out) {
  std::map<std::string, int> used;
  for (const auto& t : tree.layers) {
    const std::string group = prefix + numbered_group(t.layer ? t.layer->class_name() : t.class_name, used);
    if (t.is_model()) weight_layers(t, group + "/", out);
    else if (t.layer != nullptr) out.push_back({t.layer, group});
  }
}

// Weights Keras keeps as int64 that lockstep keeps as float32 (its variables are floating): an
// adapted Normalization's count (Keras' dtype="int" weight), written and read as int64.
bool keras_int64_weight(const layers::Layer& l, std::size_t index) {
  return index == 2 && dynamic_cast<const layers::NormalizationLayer*>(&l) != nullptr;
}

std::string date_saved() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d@%H:%M:%S", &tm);
  return buf;
}
}  // namespace

bool is_keras_archive_path(const std::string& path) { return ends_with(path, ".keras"); }
bool is_keras_weights_path(const std::string& path) { return ends_with(path, ".weights.h5"); }

std::string encode_keras_weights(const Model& model, bool with_optimizer) {
  LOCKSTEP_CHECK(model.built(), "save_model: model '", model.name(), "' is not built, so it has no weights yet");
  io::H5Content h5;
  for (const auto& [l, group] : weight_layers(model)) {
    h5.groups.push_back({group + "/vars", {{"name", l->name()}}});
    // Keras writes a (here empty) vars group for each layer inside a wrapper too.
    for (const auto& inner : l->keras_sublayers())
      h5.groups.push_back({group + "/" + inner.weights_group + "/vars", {{"name", inner.layer->name()}}});
    const auto& vars = l->variables();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      Tensor value = vars[i].read_value();
      if (keras_int64_weight(*l, i)) value = value.on_host().to(DType::kI64);
      LOCKSTEP_CHECK(keras_int64_weight(*l, i) || value.dtype() == DType::kF32, "save_model: variable '",
                     vars[i].name(), "' is ", dtype_name(value.dtype()),
                     "; Keras files are written with float32 variables");
      h5.datasets.push_back({group + "/" + l->keras_weight_path(i), value});
    }
  }
  if (with_optimizer) add_keras_optimizer_variables(model, h5);
  h5.groups.push_back({"vars", {{"name", model.name()}}});
  return io::encode_hdf5(h5);
}

void assign_keras_weights(const std::string& bytes, const std::string& source, Model& model) {
  assign_keras_weights(io::decode_hdf5(bytes, source), source, model);
}

void assign_keras_weights(const io::H5Content& h5, const std::string& source, Model& model,
                          const KerasLayerTree* file_layers) {
  const auto bad = [&](const std::string& what) { return IOError(source + " " + what); };
  io::SafetensorsContent by_name;  // the file's tensors under the model's variable names
  std::set<std::string> used;
  const bool nested = file_layers != nullptr && file_layers->has_nested_model();
  std::vector<WeightLayer> layers;
  if (nested) weight_layers(*file_layers, "", layers);
  else layers = weight_layers(model);
  for (const auto& [l, group] : layers) {
    const auto& vars = l->variables();
    const std::string who = "layer '" + l->name() + "' (" + l->class_name() + ")";
    if (h5.find_group(group + "/vars") == nullptr) {
      if (vars.empty()) continue;  // nothing to load (Keras writes the group anyway)
      throw bad("has no group " + group + "/vars for " + who + ", which has " + std::to_string(vars.size()) +
                " weights");
    }
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const std::string path = group + "/" + l->keras_weight_path(i);
      const Tensor* t = h5.find_dataset(path);
      const Tensor want = vars[i].value();
      if (t != nullptr && keras_int64_weight(*l, i) && t->dtype() == DType::kI64 && t->shape() == want.shape()) {
        by_name.tensors.emplace_back(vars[i].name(), t->to(want.dtype()));
        used.insert(path);
        continue;
      }
      if (t == nullptr)
        throw bad("has no weight " + path + " (" + who + " variable '" + vars[i].name() + "', shape " +
                  want.shape().str() + ")");
      if (t->shape() != want.shape())
        throw bad("weight " + path + " (" + who + " variable '" + vars[i].name() + "') has shape " + t->shape().str() +
                  " but the model's is " + want.shape().str());
      if (t->dtype() != want.dtype())
        throw bad("weight " + path + " holds " + dtype_name(t->dtype()) + " values but variable '" + vars[i].name() +
                  "' is " + dtype_name(want.dtype()));
      by_name.tensors.emplace_back(vars[i].name(), *t);
      used.insert(path);
    }
  }
  // Nothing in the file may go unused: a weight or layer the model lacks means another model.
  for (const auto& d : h5.datasets) {
    if (d.path.rfind("layers/", 0) != 0 || used.count(d.path)) continue;  // optimizer/..., vars/...
    const auto it = std::find_if(layers.begin(), layers.end(),
                                 [&](const WeightLayer& w) { return d.path.rfind(w.group + "/", 0) == 0; });
    // layers/<name>, or a nested model's layers/<name>/layers/<name>
    const std::string group = d.path.substr(0, std::min(d.path.find("/vars/"), d.path.find('/', 7)));
    if (it == layers.end())
      throw bad("holds " + d.path + ", but model '" + model.name() + "' has no layer whose weights go to " + group +
                "/vars (another model's file, or layers in another order)");
    throw bad("holds " + d.path + ", but layer '" + it->layer->name() + "' (" + it->layer->class_name() + ") has " +
              std::to_string(it->layer->variables().size()) + " weights");
  }
  // The optimizer's slots follow model.trainable_variables(): a nested model's layers, flattened
  // where the file's model called it, come in the file's order, which Keras' slots follow too.
  const std::function<void()> restore_optimizer = check_keras_optimizer_variables(h5, source, model);
  io::assign_verified(by_name, source, model.variables(), nullptr);
  if (restore_optimizer) restore_optimizer();
}

void save_keras_archive(const Model& model, const std::string& path, bool with_optimizer) {
  io::check_output_path(path, "save_model");
  const nlohmann::json config = keras_model_config(model);
  const nlohmann::json metadata = {
      {"keras_version", kKerasVersion}, {"date_saved", date_saved()}, {"saved_by", "lockstep"}};
  const std::string zip = io::encode_zip({{kMetadataEntry, metadata.dump()},
                                          {kConfigEntry, config.dump()},
                                          {kWeightsEntry, encode_keras_weights(model, with_optimizer)}});
  io::write_file_atomic(path, zip);
}

namespace {
// Refuses, as each layer asks for a weight and before it is allocated, a weight the file cannot
// fill: every weight is read from a distinct dataset of its shape, so the weights made so far can
// never hold more values than the file's datasets do. The dataset at the group the layer will
// read from (Sequential order: by class, numbered) is named when there is one. Smaller
// mismatches (within kAllowance) are left to assign_keras_weights, which names each weight.
class FileSizedWeights {
 public:
  static constexpr std::int64_t kAllowance = std::int64_t{1} << 24;  // values: 64 MB of float32

  explicit FileSizedWeights(const io::H5Content& h5) : h5_(h5) {
    for (const auto& d : h5.datasets)
      if (d.path.rfind("layers/", 0) == 0) capacity_ += d.value.shape().numel();
  }
  void operator()(const layers::Layer& layer, std::size_t index, const Shape& shape) {
    const auto [it, fresh] = groups_.try_emplace(&layer, std::string());
    if (fresh) {
      const std::string base = snake_case(layer.class_name());
      const int n = used_[base]++;
      it->second = "layers/" + (n == 0 ? base : base + "_" + std::to_string(n)) + "/vars";
    }
    made_ += shape.numel();
    if (made_ <= capacity_ + kAllowance) return;
    const std::string path = it->second + "/" + std::to_string(index);
    const Tensor* t = h5_.find_dataset(path);
    // No file or layer prefix: the config reader wraps this with the file and the layer.
    throw ValueError("its weight " + std::to_string(index) + " would have shape " +
                     shape.str() + " (" + std::to_string(shape.numel()) + " values), more than " + kWeightsEntry +
                     " holds (" + std::to_string(capacity_) + " values in all)" +
                     (t ? "; its " + path + " has shape " + t->shape().str() : std::string()) +
                     ": the config and the weights are of different models");
  }

 private:
  const io::H5Content& h5_;
  std::int64_t capacity_ = 0;
  std::int64_t made_ = 0;
  std::map<const layers::Layer*, std::string> groups_;
  std::map<std::string, int> used_;
};
}  // namespace

std::unique_ptr<Model> load_keras_archive(const std::string& path, bool compile) {
  // A FIFO or /dev/zero named x.keras would be read forever: only regular files are archives.
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::directory)
    throw IOError("Keras file '" + path + "' is a directory, not a .keras archive");
  if (!ec && type != std::filesystem::file_type::regular)
    throw IOError("Keras file '" + path + "' is not a regular file (a device, FIFO or socket), so not a .keras archive");
  const std::string bytes = io::read_file(path);
  // Only the two entries needed are inflated: metadata.json and anything else stay packed.
  const io::ZipArchive zip(bytes, path);
  const auto entry = [&](const char* name) {
    if (!zip.contains(name)) throw IOError("Keras file '" + path + "' has no " + name + " (it is not a Keras 3 .keras archive)");
    return zip.read(name);
  };
  const nlohmann::json config = io::detail::parse_json(entry(kConfigEntry), "Keras file '" + path + "': config.json");
  const std::string weights_source = "Keras file '" + path + "': " + kWeightsEntry;
  // The weights are read first, so that the model the config describes is built no larger than
  // they are (units: 600000 is refused before its 1.9 GB kernel is allocated).
  const io::H5Content h5 = io::decode_hdf5(entry(kWeightsEntry), weights_source);
  std::unique_ptr<Model> model;
  KerasLayerTree file_layers;
  {
    const layers::detail::WeightCheck check(FileSizedWeights{h5});
    model = model_from_keras_config(config, path, compile, &file_layers);
  }
  assign_keras_weights(h5, weights_source, *model, &file_layers);
  return model;
}

}  // namespace lockstep::detail
