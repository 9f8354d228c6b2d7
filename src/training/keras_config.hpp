#pragma once
// config.json of a Keras 3 `.keras` archive: the Sequential or Functional architecture (and compile config) in
// Keras' own classes, argument names and serialisation (initializers and dtype policies as
// {"module", "class_name", "config"} objects), translated to and from lockstep's layers.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// A model's layers as its .keras file lists them, Keras' model.layers (a Functional's InputLayers
/// included, a Sequential's not), a nested model (Keras' `base_model(x)`, class Functional or
/// Sequential) holding its own: the tree that model.weights.h5's groups follow
/// (layers/functional/layers/dense/vars). The loaded model holds a nested model's layers flattened.
struct KerasLayerTree {
  std::string class_name;               // Keras' class: "Dense", "InputLayer", "Functional", ...
  const layers::Layer* layer = nullptr;  // the layer loaded; null for an InputLayer and a model
  std::vector<KerasLayerTree> layers;    // a nested model's
  bool is_model() const { return class_name == "Functional" || class_name == "Sequential"; }
  /// Whether a model is among the layers (at any depth).
  bool has_nested_model() const;
};

/// How deep models may nest in a .keras file (a model in a model in ...): a bound for hostile files,
/// below what config.json's bound on JSON depth (64) lets through (about 20 levels).
inline constexpr int kMaxKerasNesting = 16;

/// What keras.Sequential.get_config() or Functional.get_config() (plus compile_config when
/// compiled) gives for `model`, which must be built. A Sequential's first layer is an InputLayer
/// with the model's input shape. ValueError naming a layer whose class Keras files cannot describe.
nlohmann::json keras_model_config(const Model& model);

/// The Sequential or Functional model that config.json `j` describes, built. Every layer class and
/// every argument is translated or refused: IOError "Keras file '<source>': layer '<name>'
/// (<class>): ..." for a class lockstep lacks (with the classes it has), an argument lockstep lacks
/// (an argument that is null or false, Keras' "off", is accepted), or a value a layer refuses; a
/// model that is neither a Sequential nor a Functional of one input and one output (a subclass) is
/// refused naming its class. The compile config, when present, compiles the model; one lockstep
/// cannot express (another optimizer, a schedule class it lacks, a metric it lacks) leaves it uncompiled with a
/// WARNING on stderr, as keras.saving.load_model does.
/// With `compile` false the compile config is not read (LoadModelOptions::compile).
/// A layer of class Functional or Sequential is a nested model (Keras' `base_model(x)`): it is
/// built from its config and called where its inbound_nodes say (lockstep::call(model, xs), its
/// training= kept), so that the model returned holds its layers flattened; its config's
/// "trainable": false freezes them all (Keras' recursive setter). A Sequential holding a model
/// loads as a Functional of the same layers. IOError naming a model nested more than
/// kMaxKerasNesting deep. `tree`, where given, receives the file's layers as listed (KerasLayerTree).
std::unique_ptr<Model> model_from_keras_config(const nlohmann::json& j, const std::string& source, bool compile = true,
                                               KerasLayerTree* tree = nullptr);

}  // namespace lockstep::detail
