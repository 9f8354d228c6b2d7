#include "training/keras_config.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <map>
#include <set>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/sequential.hpp"
#include "lockstep/optimizers/optimizer_config.hpp"
#include "nn/config_reader.hpp"
#include "training/compile_config.hpp"
#include "training/functional_config.hpp"
#include "training/layer_config.hpp"

namespace lockstep::detail {

namespace {
using nlohmann::json;

// Keras arguments lockstep accepts whatever their value, for any class: randomness comes from the
// model's seed (keyed per layer, step and example), so no Keras seed would reproduce Keras' draws
// anyway; renorm_momentum is only read by renorm, which must be off. A seed is kept, though, for a
// class that takes one as its own stream (its registry row does not fix seed: RandomFlip,
// RandomContrast, RandomBrightness, RandomTranslation, RandomRotation, RandomZoom), so that it
// crosses a file both ways.
const std::set<std::string> kIgnoredArguments = {"seed", "renorm_momentum"};

// lockstep's initializer names <-> Keras' classes.
const std::map<std::string, std::string> kInitializers = {
    {"glorot_uniform", "GlorotUniform"}, {"glorot_normal", "GlorotNormal"}, {"he_normal", "HeNormal"},
    {"he_uniform", "HeUniform"},         {"zeros", "Zeros"},                {"ones", "Ones"},
    {"uniform", "RandomUniform"},        {"orthogonal", "Orthogonal"}};
// The arguments of a Keras class that lockstep's initializer fixes (Keras' own defaults).
const std::map<std::string, json> kInitializerArguments = {{"uniform", {{"minval", -0.05}, {"maxval", 0.05}}},
                                                           {"orthogonal", {{"gain", 1.0}}}};
json initializer_arguments(const std::string& name) {
  const auto it = kInitializerArguments.find(name);
  return it == kInitializerArguments.end() ? json::object() : it->second;
}

bool is_off(const json& v) { return v.is_null() || v == json(false); }

bool is_initializer_key(const std::string& key) {
  if (key == "initializer") return true;  // keras_hub's PositionEmbedding
  return key.size() > 12 && key.compare(key.size() - 12, 12, "_initializer") == 0;
}

json keras_object(const std::string& module, const std::string& cls, json config) {
  return {{"module", module}, {"class_name", cls}, {"config", std::move(config)}, {"registered_name", nullptr}};
}

json policy_to_keras(const std::string& name) {
  return keras_object("keras", "DTypePolicy", {{"name", name}});
}

json initializer_to_keras(const std::string& name) {
  const auto it = kInitializers.find(name);
  LOCKSTEP_CHECK(it != kInitializers.end(), "save_model: initializer '", name, "' has no Keras class");
  const bool random = name != "zeros" && name != "ones";
  json config = initializer_arguments(name);
  if (random) config["seed"] = nullptr;
  return keras_object("keras.initializers", it->second, config);
}

class LayerReader {
 public:
  LayerReader(const std::string& source, const json& layer) : source_(source) {
    if (!layer.is_object() || !layer.contains("class_name") || !layer.at("class_name").is_string())
      throw IOError("Keras file '" + source + "': a layer of the model has no class_name: " + clip(layer));
    cls_ = layer.at("class_name").get<std::string>();
    if (!layer.contains("config") || !layer.at("config").is_object())
      throw IOError("Keras file '" + source + "': a " + cls_ + " layer has no config object");
    config_ = layer.at("config");
    name_ = config_.value("name", json()).is_string() ? config_.at("name").get<std::string>() : std::string();
  }
  const std::string& cls() const { return cls_; }
  const std::string& name() const { return name_; }
  const json& config() const { return config_; }
  /// Keras' "trainable" (true where the config lacks it): false is a frozen layer.
  bool trainable() const {
    const json& t = config_.value("trainable", json(true));
    if (!t.is_boolean()) fail("trainable=" + clip(t) + " is not a boolean");
    return t.get<bool>();
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw IOError("Keras file '" + source_ + "': layer '" + name_ + "' (" + cls_ + "): " + what);
  }
  [[noreturn]] void unsupported(const std::string& key, const json& value) const {
    fail("argument " + key + "=" + clip(value) + " is not supported by lockstep");
  }

  // A dtype policy: a name, or {"class_name": "DTypePolicy", "config": {"name": ...}}.
  std::string policy() const {
    const json& d = config_.value("dtype", json());
    if (d.is_null()) return "float32";
    if (d.is_string()) return d.get<std::string>();
    if (d.is_object() && d.value("class_name", json()) == json("DTypePolicy") && d.contains("config") &&
        d.at("config").is_object() && d.at("config").value("name", json()).is_string())
      return d.at("config").at("name").get<std::string>();
    unsupported("dtype", d);
  }

  // The lockstep config (the layer's get_config() JSON) of this layer: Keras' own arguments
  // (trainable and dtype, read by themselves; the arguments lockstep fixes; the ignored ones) taken out.
  json to_lockstep(const layers::LayerClass& c) const {
    if (name_.empty()) fail("the config has no name");
    json out = {{"name", name_}};
    for (const auto& [key, value] : config_.items()) {
      if (key == "seed" && !c.keras_fixed.contains("seed") && !value.is_null()) {
        out[key] = value;
        continue;
      }
      if (key == "name" || key == "dtype" || key == "trainable" || kIgnoredArguments.count(key)) continue;
      if (c.keras_fixed.contains(key)) {
        if (!is_off(value) && value != c.keras_fixed.at(key))
          fail("argument " + key + "=" + clip(value) + " is not supported by lockstep (its " + cls_ + " has " +
               key + "=" + c.keras_fixed.at(key).dump() + " only)");
      } else if (value.is_object() && value.value("module", json()) == json("keras.layers")) {
        out[key] = nested_layer(value);  // Bidirectional's layer and backward_layer
      } else {
        out[key] = is_initializer_key(key) ? json(initializer(key, value)) : value;
      }
    }
    return out;
  }

  // Refuses an argument of the file that `layer` does not have (its get_config() lacks it),
  // unless it is Keras' "off".
  void check_arguments(const json& ours, const layers::Layer& layer) const {
    const json has = layer.get_config();
    for (const auto& [key, value] : ours.items())
      if (!has.contains(key) && !is_off(value)) unsupported(key, config_.at(key));
    if (const std::string bad = non_integer_argument(ours, has); !bad.empty()) fail(bad);
  }

 private:
  std::string initializer(const std::string& key, const json& v) const {
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (kInitializers.count(s)) return s;
      for (const auto& [ours, keras] : kInitializers)
        if (keras == s) return ours;
    } else if (v.is_object() && v.value("class_name", json()).is_string()) {
      const std::string k = v.at("class_name").get<std::string>();
      for (const auto& [ours, keras] : kInitializers) {
        if (keras != k) continue;
        // Initial values come from lockstep's own seeded generator, so a seed changes nothing
        // that matters after load (the weights are read from the file); any other option would.
        const json config = v.value("config", json::object());
        const json fixed = initializer_arguments(ours);
        for (const auto& [ck, cv] : config.items()) {
          const bool as_fixed = fixed.contains(ck) && cv.is_number() && cv.get<double>() == fixed.at(ck).get<double>();
          if (ck != "seed" && !cv.is_null() && !as_fixed) unsupported(key + "." + ck, cv);
        }
        return ours;
      }
    }
    unsupported(key, v);
  }

  // A layer inside this one's config as lockstep's {"class_name", "config"}.
  json nested_layer(const json& v) const {
    const LayerReader inner(source_, v);
    const auto c = layers::find_layer_class(inner.cls());
    if (!c) inner.fail("this layer class is not supported by lockstep (it reads " + layers::layer_class_names() + ")");
    return {{"class_name", inner.cls()}, {"config", inner.to_lockstep(*c)}};
  }

  static std::string clip(const json& v) {
    std::string s = v.dump();
    return s.size() > 200 ? s.substr(0, 200) + "..." : s;
  }

  const std::string& source_;
  std::string cls_;
  std::string name_;
  json config_;
};

// The Keras config of one lockstep layer (Keras' serialisation around its get_config()).
json layer_to_keras(const layers::Layer& l) {
  const json ours = layer_to_json(l).at("config");  // ValueError for an unregistered class
  json config = {{"name", l.name()}, {"trainable", l.trainable()}, {"dtype", policy_to_keras(l.dtype_policy().name())}};
  for (const auto& [key, value] : ours.items()) {
    // A declared input_dim (Dense's) is the InputLayer's shape; Embedding's is its vocabulary.
    if (key == "name" || (key == "input_dim" && l.declared_input_shape())) continue;
    config[key] = is_initializer_key(key) ? initializer_to_keras(value.get<std::string>()) : value;
  }
  const auto cls = layers::find_layer_class(l.class_name());
  config.update(cls->keras_fixed);
  for (const std::string& key : cls->keras_not_taken) config.erase(key);
  for (const auto& inner : l.keras_sublayers()) config[inner.config_key] = layer_to_keras(*inner.layer);
  const std::string registered = l.keras_registered_name();
  return {{"module", l.keras_module()},
          {"class_name", l.class_name()},
          {"config", config},
          {"registered_name", registered.empty() ? json(nullptr) : json(registered)},
          {"build_config", {{"input_shape", shape_to_json(l.input_shape())}}}};
}

std::string keras_loss_class(const std::string& snake) {
  std::string out;
  bool upper = true;
  for (char ch : snake) {
    if (ch == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    upper = false;
  }
  return out;
}

json compile_to_keras(const Model& model) {
  json opt = optimizers::serialize(*model.optimizer());
  json& oc = opt.at("config");
  std::string lower = opt.at("class_name").get<std::string>();
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  oc["name"] = lower;
  const auto keras_loss = [](const losses::Loss& loss) {
    if (!loss.from_logits()) return json(loss.name());
    return keras_object("keras.losses", keras_loss_class(loss.name()),
                        {{"name", loss.name()}, {"reduction", "sum_over_batch_size"}, {"from_logits", true}});
  };
  json loss = keras_loss(*model.loss()), loss_weights = nullptr, metrics = json::array(), weighted = nullptr;
  if (model.output_losses().empty()) {
    metrics = metric_identifiers(model, 0, false);
    if (json w = metric_identifiers(model, 0, true); !w.empty()) weighted = std::move(w);
  } else {  // per output, in the outputs' form (a dict by name, else a list); metrics unprefixed
    const Structure& outs = model.output_structure();
    const bool dict = outs.form == Structure::Form::kDict;
    loss = dict ? json::object() : json::array();
    loss_weights = loss;
    metrics = loss;
    const bool any_weighted = std::ranges::any_of(model.metrics(), &Model::CompiledMetric::weighted);
    if (any_weighted) weighted = loss;  // Keras writes None for none
    for (std::size_t k = 0; k < outs.size(); ++k) {
      const auto& head = model.output_losses()[k];
      const auto put = [&](json& where, json value) {
        if (dict) where[head.name] = std::move(value);
        else where.push_back(std::move(value));
      };
      put(loss, keras_loss(*head.loss));
      put(loss_weights, head.weight);
      put(metrics, metric_identifiers(model, k, false));
      // A dict names only the outputs that have some (Keras writes the dict it was given).
      if (json w = metric_identifiers(model, k, true); any_weighted && (!dict || !w.empty())) put(weighted, std::move(w));
    }
  }
  return {{"optimizer", keras_object("keras.optimizers", opt.at("class_name").get<std::string>(), oc)},
          {"loss", loss},
          {"loss_weights", loss_weights},
          {"metrics", metrics},
          {"weighted_metrics", weighted},
          {"run_eagerly", false},
          {"steps_per_execution", model.steps_per_execution()},
          {"jit_compile", model.jit_compile() == JitCompile::kAuto ? json("auto")
                                                                    : json(model.jit_compile() == JitCompile::kOn)}};
}

// Keras' compile config -> lockstep's CompileParts (compile_config.hpp): the functions below, each a
// string naming what lockstep cannot express, empty when read.

// One Keras loss (a name or a serialised object) as lockstep's {"class_name", "config"}; a
// string naming what lockstep cannot express otherwise.
std::string loss_from_keras(const json& l, json& out) {
  static const std::map<std::string, std::string> kLosses = {
      {"SparseCategoricalCrossentropy", "sparse_categorical_crossentropy"},
      {"CategoricalCrossentropy", "categorical_crossentropy"},
      {"BinaryCrossentropy", "binary_crossentropy"},
      {"MeanSquaredError", "mean_squared_error"},
      {"MeanAbsoluteError", "mean_absolute_error"}};
  if (l.is_string()) {
    std::string name = l.get<std::string>();
    if (kLosses.count(name)) name = kLosses.at(name);
    if (name == "mse") name = "mean_squared_error";
    if (name == "mae") name = "mean_absolute_error";
    out = {{"class_name", name}, {"config", json::object()}};
  } else if (l.is_object() && l.value("class_name", json()).is_string() && kLosses.count(l.at("class_name"))) {
    const std::string cls = l.at("class_name").get<std::string>();
    const json config = l.value("config", json::object());
    try {  // Keras' options at lockstep's only values are passed; from_logits is read
      detail::ConfigReader r("loss " + cls, config);
      r.pass_over({"name", "dtype"});
      if (const json* axis = r.raw("axis"); axis && *axis != json(-1)) r.fail("axis", *axis, "is not supported (-1 is)");
      if (const std::string reduction = r.string("reduction", "sum_over_batch_size"); reduction != "sum_over_batch_size")
        r.fail("reduction", reduction, "is not supported (sum_over_batch_size is)");
      if (const double smoothing = r.number("label_smoothing", 0.0); smoothing != 0.0)
        r.fail("label_smoothing", smoothing, "is not supported");
      json lc = json::object();
      if (r.raw("from_logits")) lc["from_logits"] = r.boolean("from_logits", false);
      r.refuse_the_rest();
      out = {{"class_name", kLosses.at(cls)}, {"config", lc}};
    } catch (const ValueError& e) {
      return e.what();
    }
  } else {
    return "loss " + l.dump().substr(0, 120) + " is not supported";
  }
  return {};
}

// A list of metric identifiers, names or serialised objects (checked as they are made, with the
// loss); a string naming what lockstep cannot express otherwise.
std::string metrics_from_keras(const json& m, std::vector<json>& out) {
  if (!m.is_array()) return "metrics " + m.dump().substr(0, 120) + " are not supported (a list is)";
  out.assign(m.begin(), m.end());
  return {};
}

// loss, loss_weights and metrics per output (a dict by output name, or a list in the outputs'
// order) for a model of several outputs.
std::string per_output_from_keras(const json& c, const Structure& outs, CompileParts& out) {
  // The entry of `j` (a dict or a list) for output k; null when there is none.
  const auto entry = [&](const json& j, std::size_t k) -> json {
    if (j.is_object()) return j.value(outs.names[k], json());
    if (j.is_array() && j.size() == outs.size()) return j[k];
    return json();
  };
  const json& l = c.value("loss", json());
  const json& w = c.value("loss_weights", json());
  const json& m = c.value("metrics", json());
  const json& wm = c.value("weighted_metrics", json());
  const bool one_loss = l.is_string() || (l.is_object() && l.contains("class_name"));
  for (const json* j : {&l, &w, &m, &wm}) {
    if (j == &l && one_loss) continue;
    if (j->is_array() && j->size() != outs.size() && !((j == &m || j == &wm) && j->empty()))
      return "a list of " + std::to_string(j->size()) + " per output does not match the " +
             std::to_string(outs.size()) + " outputs (" + outs.joined() + ")";
    if (j->is_object())
      for (const auto& [key, value] : j->items())
        if (std::find(outs.names.begin(), outs.names.end(), key) == outs.names.end())
          return "'" + key + "' is not an output of the model (" + outs.joined() + ")";
  }
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const std::string& name = outs.names[k];
    const json lk = one_loss ? l : entry(l, k);
    if (lk.is_null()) return "output '" + name + "' has no loss";
    if (std::string p = loss_from_keras(lk, out.losses[name]); !p.empty()) return p;
    const json wk = entry(w, k);
    if (wk.is_number()) out.loss_weights[name] = wk.get<double>();
    else if (!wk.is_null()) return "loss_weights " + w.dump().substr(0, 120) + " are not supported";
    for (const auto& [given, listed] : {std::pair{&m, &out.output_metrics}, {&wm, &out.output_weighted_metrics}}) {
      json mk = entry(*given, k);
      if (mk.is_string() || (mk.is_object() && mk.contains("class_name"))) mk = json::array({mk});  // one metric
      if (!mk.is_null())
        if (std::string p = metrics_from_keras(mk, (*listed)[name]); !p.empty()) return p;
    }
  }
  return {};
}

std::string compile_from_keras(const json& c, const Structure& outs, CompileParts& out) {
  if (!c.is_object()) return "compile_config is not an object";
  for (const auto& [key, value] : c.items()) {
    if (key == "optimizer" || key == "loss" || key == "metrics" || key == "weighted_metrics" ||
        (key == "loss_weights" && outs.size() > 1))
      continue;
    if (key == "steps_per_execution") {
      if (value.is_null()) continue;
      if (!value.is_number_integer() || value.get<std::int64_t>() < 1)
        return "compile argument steps_per_execution=" + value.dump() + " is not a positive integer";
      out.steps_per_execution = value.get<std::int64_t>();
      continue;
    }
    if (key == "jit_compile") {  // Keras writes "auto", true or false
      if (value.is_boolean()) out.jit_compile = value.get<bool>() ? JitCompile::kOn : JitCompile::kOff;
      else if (value != json("auto") && !value.is_null())
        return "compile argument jit_compile=" + value.dump() + " is not supported";
      continue;
    }
    if (key == "run_eagerly" || key == "auto_scale_loss")
      continue;  // how Keras runs a step, not what it computes
    if (!is_off(value)) return "compile argument " + key + "=" + value.dump() + " is not supported";
  }
  // Keras' optimizer: a name (its defaults) or a serialised object, whose options
  // optimizers::deserialize reads and refuses.
  const json& o = c.value("optimizer", json());
  json keras_optimizer;
  if (o.is_string()) {
    const std::string& n = o.get<std::string>();
    const std::string cls =
        n == "sgd" ? "SGD" : n == "adam" ? "Adam" : n == "adamw" ? "AdamW" : n == "rmsprop" ? "RMSprop" : n;
    keras_optimizer = {{"class_name", cls}, {"config", json::object()}};
  } else if (o.is_object() && o.value("class_name", json()).is_string() && o.value("config", json()).is_object()) {
    keras_optimizer = {{"class_name", o.at("class_name")}, {"config", o.at("config")}};
  } else {
    return "optimizer " + o.dump().substr(0, 120) + " is not supported";
  }
  try {
    out.optimizer = optimizers::deserialize(keras_optimizer);
  } catch (const std::exception& e) {  // lockstep's errors, nlohmann's for a mistyped option
    return e.what();
  }

  if (outs.size() > 1) return per_output_from_keras(c, outs, out);
  if (std::string p = loss_from_keras(c.value("loss", json()), out.loss); !p.empty()) return p;
  const json& m = c.value("metrics", json());
  if (!m.is_null())
    if (std::string p = metrics_from_keras(m, out.metrics); !p.empty()) return p;
  const json& wm = c.value("weighted_metrics", json());
  if (!wm.is_null()) return metrics_from_keras(wm, out.weighted_metrics);
  return {};
}

json input_layer_to_keras(const std::string& name, const Shape& batch_shape) {
  return {{"module", "keras.layers"},
          {"class_name", "InputLayer"},
          {"config",
           {{"batch_shape", shape_to_json(batch_shape)},
            {"dtype", "float32"},
            {"sparse", false},
            {"ragged", false},
            {"name", name},
            {"optional", false}}},
          {"registered_name", nullptr}};
}

// The lockstep layer a Keras layer entry describes, with its dtype policy; IOError naming it.
layers::LayerPtr layer_from_keras(const LayerReader& r) {
  const auto c = layers::find_layer_class(r.cls());
  if (!c) r.fail("this layer class is not supported by lockstep (it reads " + layers::layer_class_names() + ")");
  const json ours = r.to_lockstep(*c);
  if (const std::string bad = out_of_range_argument(ours); !bad.empty()) r.fail(bad);
  const bool trainable = r.trainable();
  layers::LayerPtr layer;
  try {
    layer = c->from_config(ours);
    layer->set_dtype_policy(mixed_precision::Policy(r.policy()));
    layer->set_trainable(trainable);
  } catch (const json::exception& e) {
    r.fail(std::string("missing or mistyped argument (") + e.what() + ")");
  } catch (const Error& e) {
    r.fail(e.what());
  }
  r.check_arguments(ours, *layer);
  return layer;
}

json functional_to_keras(const Functional& model) {
  json config = functional_config(model, [&](const layers::Layer& l) {
    if (dynamic_cast<const layers::InputLayer*>(&l) != nullptr) return input_layer_to_keras(l.name(), l.input_shape());
    return layer_to_keras(l);
  });
  // Keras writes the build shape of a layer called on a list (a merge layer) from its inputs'
  // shapes, as the layer says; a recurrent layer first called with initial_state, {"shapes_dict":
  // {"sequences_shape", "initial_state_shape": [...]}} (RNN.build(sequences_shape, initial_state_shape)).
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    const auto& calls = model.calls_of(i);
    if (calls.empty()) continue;
    const auto& first = model.nodes()[calls.front()];
    const auto shape_of = [&](std::size_t a) {
      return shape_to_json(model.nodes()[first.inputs[a]].output(static_cast<std::size_t>(first.input_index[a])));
    };
    if (first.initial_states) {
      json states = json::array();
      for (std::size_t a = first.arguments(); a < first.arguments() + first.initial_states; ++a) states.push_back(shape_of(a));
      config["layers"][i]["build_config"] = {
          {"shapes_dict", {{"sequences_shape", shape_of(0)}, {"initial_state_shape", states}}}};
    }
    if (!first.list_call) continue;
    json shapes = json::array();
    for (std::size_t a = 0; a < first.arguments(); ++a) shapes.push_back(shape_of(a));
    config["layers"][i]["build_config"] = model.layers()[i]->keras_build_config(shapes);
  }
  return {{"module", "keras.src.models.functional"},
          {"class_name", "Functional"},
          {"config", config},
          {"registered_name", "Functional"},
          {"build_config", {{"input_shape", nullptr}}}};
}

std::vector<std::int64_t> input_batch_shape(const LayerReader& r) {
  for (const auto& [key, value] : r.config().items()) {
    if (key == "name" || key == "batch_shape" || key == "batch_input_shape") continue;
    if (key == "dtype") {
      if (r.policy() != "float32") r.unsupported("dtype", value);
    } else if (!is_off(value)) {
      r.unsupported(key, value);
    }
  }
  const json& s = r.config().contains("batch_shape") ? r.config().at("batch_shape")
                                                      : r.config().value("batch_input_shape", json());
  if (!s.is_array() || s.empty() || !s.at(0).is_null())
    r.fail("batch_shape=" + s.dump() + " must be a list starting with the (None) batch dimension");
  try {
    return shape_from_json(s).dims();
  } catch (const json::exception&) {
    r.fail("batch_shape=" + s.dump() + " must hold integers after the batch dimension");
  }
}
std::unique_ptr<Model> model_from_entry(const json& j, const std::string& source, int depth, KerasLayerTree& tree);

bool is_model_entry(const json& entry) {
  const json& c = entry.is_object() ? entry.value("class_name", json()) : json();
  return c == json("Functional") || c == json("Sequential");
}

// A layer entry of class Functional or Sequential (Keras' nested model), built from its config at
// one level deeper; its "trainable": false freezes it whole, as Keras' setter does.
std::shared_ptr<const Model> nested_model(const json& entry, const std::string& source, int depth,
                                          KerasLayerTree& tree) {
  const json& config = entry.value("config", json());
  const std::string name = config.is_object() && config.value("name", json()).is_string()
                               ? config.at("name").get<std::string>()
                               : entry.value("name", json("?")).dump();
  if (depth >= kMaxKerasNesting)
    throw IOError("Keras file '" + source + "': model '" + name + "' is nested " + std::to_string(depth + 1) +
                  " levels deep (a model in a model ...), more than lockstep's bound of " +
                  std::to_string(kMaxKerasNesting));
  std::unique_ptr<Model> inner = model_from_entry(entry, source, depth + 1, tree);
  const json& trainable = config.value("trainable", json(true));
  if (!trainable.is_boolean())
    throw IOError("Keras file '" + source + "': model '" + name + "': trainable=" + trainable.dump().substr(0, 100) +
                  " is not a boolean");
  if (!trainable.get<bool>()) inner->set_trainable(false);
  return inner;
}

// A Sequential holding a nested model: a Functional of the same layers in turn (lockstep's
// Sequential holds layers only), the nested model's flattened into it.
std::unique_ptr<Model> sequential_as_functional(const std::vector<std::pair<LayerReader, Callee>>& entries,
                                                const Shape& input, const std::string& input_name,
                                                const std::string& name, const std::string& source) {
  const KerasTensor in = Input(input.tail(), input_name);
  KerasTensor x = in;
  for (const auto& [r, callee] : entries) {
    try {
      if (!callee.model) {
        x = call(callee.layer, x);
        continue;
      }
      const std::vector<KerasTensor> out = call(*callee.model, {x});
      if (out.size() != 1)
        throw ValueError("a Sequential's layer must make one tensor, but model '" + callee.model->name() +
                         "' makes " + std::to_string(out.size()));
      x = out.front();
    } catch (const Error& e) {
      r.fail(e.what());
    }
  }
  try {
    return std::make_unique<Functional>(in, x, name);
  } catch (const Error& e) {
    throw IOError("Keras file '" + source + "': the Sequential '" + name + "': " + e.what());
  }
}

std::unique_ptr<Model> sequential_from_keras_layers(const json& j, const std::string& source, int depth,
                                                    KerasLayerTree& tree) {
  const auto bad = [&](const std::string& what) { return IOError("Keras file '" + source + "': " + what); };
  const json& config = j.value("config", json());
  if (!config.is_object() || !config.value("layers", json()).is_array())
    throw bad("the Sequential config has no list of layers");
  const std::string name = config.value("name", json()).is_string() ? config.at("name").get<std::string>() : "sequential";

  std::optional<Shape> input;
  std::string input_name = "input_layer";
  bool input_layer = false;
  std::vector<std::pair<LayerReader, Callee>> entries;
  bool nested = false;
  for (const auto& entry : config.at("layers")) {
    const LayerReader r(source, entry);
    if (r.cls() == "InputLayer") {
      if (input || !entries.empty()) r.fail("an InputLayer must come first, once");
      input = Shape(input_batch_shape(r));
      input_layer = true;
      if (!r.name().empty()) input_name = r.name();
      continue;
    }
    KerasLayerTree& leaf = tree.layers.emplace_back();
    if (is_model_entry(entry)) {
      entries.emplace_back(r, nested_model(entry, source, depth, leaf));
      nested = true;
    } else {
      layers::LayerPtr layer = layer_from_keras(r);
      leaf = {r.cls(), layer.get(), {}};
      entries.emplace_back(r, std::move(layer));
    }
  }
  if (entries.empty()) throw bad("the Sequential has no layers");
  if (!input) {
    const json& b = config.value("build_input_shape", json());
    if (b.is_null()) throw bad("the model has no input shape (no InputLayer, no build_input_shape): it was saved unbuilt");
    try {
      input = shape_from_json(b);
    } catch (const json::exception&) {
      throw bad("build_input_shape=" + b.dump() + " is not a shape");
    }
  }
  if (nested) return sequential_as_functional(entries, *input, input_name, name, source);

  auto model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{}, name);
  // Kept as lockstep's InputLayer, so the layer list (and a save back) is Keras' own.
  if (input_layer) model->add(std::make_shared<layers::InputLayer>(input->tail(), input_name));
  for (const auto& [r, callee] : entries) {
    try {
      model->add(callee.layer);
    } catch (const Error& e) {
      r.fail(e.what());
    }
  }
  try {
    if (!model->built()) model->build(*input);
  } catch (const Error& e) {
    throw bad(std::string("the layers do not fit together: ") + e.what());
  }
  return model;
}

std::unique_ptr<Functional> functional_from_keras_layers(const json& j, const std::string& source, int depth,
                                                         KerasLayerTree& tree) {
  std::map<std::string, KerasLayerTree> made;  // by the entry's name
  auto model = functional_from_config(
      j.value("config", json()),
      [&](const json& entry) -> Callee {
        KerasLayerTree& leaf = made[entry.at("name").get<std::string>()];
        if (is_model_entry(entry)) return nested_model(entry, source, depth, leaf);
        const LayerReader r(source, entry);
        // Its inputs come from "inbound_nodes", its weights from the file.
        layers::LayerPtr layer = layer_from_keras(r);
        leaf = {r.cls(), layer.get(), {}};
        return layer;
      },
      std::nullopt, "Keras file '" + source + "'");
  // The file's order (Keras' model.layers), which its weights' groups follow; NotEqual (a mask) is no layer.
  for (const auto& entry : j.at("config").at("layers")) {
    if (entry.value("class_name", json()) == json("InputLayer")) tree.layers.push_back({"InputLayer", nullptr, {}});
    else if (const auto it = made.find(entry.at("name").get<std::string>()); it != made.end())
      tree.layers.push_back(std::move(it->second));
  }
  return model;
}

// The Functional or Sequential that `j` (config.json, or a nested model's layer entry) describes.
std::unique_ptr<Model> model_from_entry(const json& j, const std::string& source, int depth, KerasLayerTree& tree) {
  const std::string cls = j.at("class_name").get<std::string>();
  tree.class_name = cls;
  if (cls == "Functional") return functional_from_keras_layers(j, source, depth, tree);
  if (cls == "Sequential") return sequential_from_keras_layers(j, source, depth, tree);
  throw IOError("Keras file '" + source + "': the model is a " + cls +
                " model; lockstep reads Sequential and Functional models only (of the layers " +
                layers::layer_class_names() + ")");
}

void compile_from_keras_file(const json& j, Model& model, const std::string& source) {
  // Keras 3 writes an uncompiled model's compile_config as null or {}: nothing to compile.
  const auto compiled = [&] {
    if (!j.contains("compile_config")) return false;
    const json& c = j.at("compile_config");
    return !c.is_null() && !(c.is_object() && c.empty());
  };
  if (compiled()) {
    CompileParts parts;
    std::string problem = compile_from_keras(j.at("compile_config"), model.output_structure(), parts);
    if (problem.empty()) {
      try {
        compile_from_parts(model, parts);
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    if (!problem.empty())
      std::fprintf(stderr, "WARNING: Keras file '%s': the model is loaded uncompiled: %s\n", source.c_str(),
                   problem.c_str());
  }
}
}  // namespace

json keras_model_config(const Model& any) {
  LOCKSTEP_CHECK(any.built(), "save_model: model '", any.name(), "' is not built, so it has no weights yet");
  if (const auto* f = dynamic_cast<const Functional*>(&any)) {
    json j = functional_to_keras(*f);
    if (f->compiled()) j["compile_config"] = compile_to_keras(*f);
    return j;
  }
  const auto* seq = dynamic_cast<const Sequential*>(&any);
  LOCKSTEP_CHECK(seq != nullptr, "save_model: model '", any.name(), "' is neither a Sequential nor a Functional");
  const Sequential& model = *seq;
  const auto& first = *model.layers().front();
  std::string input_name = "input_layer";
  if (dynamic_cast<const layers::InputLayer*>(&first) != nullptr) input_name = first.name();
  json list = json::array({input_layer_to_keras(input_name, first.input_shape())});
  for (const auto& l : model.layers())
    if (dynamic_cast<const layers::InputLayer*>(l.get()) == nullptr) list.push_back(layer_to_keras(*l));
  const json shape = shape_to_json(first.input_shape());
  json j = {{"module", "keras"},
            {"class_name", "Sequential"},
            {"config",
             {{"name", model.name()},
              {"trainable", model.trainable()},
              {"dtype", policy_to_keras("float32")},
              {"layers", list},
              {"build_input_shape", shape}}},
            {"registered_name", nullptr},
            {"build_config", {{"input_shape", shape}}}};
  if (model.compiled()) j["compile_config"] = compile_to_keras(model);
  return j;
}

bool KerasLayerTree::has_nested_model() const {
  return std::any_of(layers.begin(), layers.end(), [](const KerasLayerTree& t) { return t.is_model(); });
}

std::unique_ptr<Model> model_from_keras_config(const json& j, const std::string& source, bool compile,
                                               KerasLayerTree* tree) {
  if (!j.is_object() || !j.value("class_name", json()).is_string())
    throw IOError("Keras file '" + source + "': config.json does not describe a model (no class_name)");
  KerasLayerTree own;
  std::unique_ptr<Model> result = model_from_entry(j, source, 0, tree != nullptr ? *tree : own);
  if (compile) compile_from_keras_file(j, *result, source);
  return result;
}

}  // namespace lockstep::detail
