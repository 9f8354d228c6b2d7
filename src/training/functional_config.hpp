#pragma once
// A Functional model's architecture as Keras 3 writes it (Functional.get_config()): every layer's
// {"class_name", "config", ...} plus "name" and "inbound_nodes" (each call's arguments, a symbolic
// tensor being {"class_name": "__keras_tensor__", "config": {"shape", "dtype", "keras_history":
// [layer, node_index, 0]}}), "input_layers" and "output_layers". Used by lockstep's saved models
// (layers as layer_config.cpp writes them) and by .keras files (as Keras does).
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "lockstep/training/functional.hpp"

namespace lockstep::detail {

using LayerToJson = std::function<nlohmann::json(const layers::Layer&)>;
/// What one entry of "layers" makes: a layer, or a model (a .keras file's nested Functional or
/// Sequential, Keras' `base_model(x)`), whose calls call its layers in the graph being built
/// (lockstep::call(model, xs, kwargs): the outer model holds them, flattened). A model's outputs
/// are its calls' tensors 0, 1, ... (keras_history [name, node, k]).
struct Callee {
  Callee(layers::LayerPtr l) : layer(std::move(l)) {}  // NOLINT(google-explicit-constructor): a layer is a callee
  Callee(std::shared_ptr<const Model> m) : model(std::move(m)) {}  // NOLINT(google-explicit-constructor)
  layers::LayerPtr layer;
  std::shared_ptr<const Model> model;
};
/// Makes a layer or a model (not an InputLayer) from one entry of "layers"; throws IOError naming what is wrong.
using LayerFromJson = std::function<Callee(const nlohmann::json&)>;

/// {"name", "trainable", "layers", "input_layers", "output_layers"}.
nlohmann::json functional_config(const Functional& model, const LayerToJson& layer_json);

/// Calls the layers as "inbound_nodes" says and makes the model. IOError "<source>: ..." naming a
/// missing or unknown layer reference, a graph that cannot be completed, or a layer that cannot
/// take its inputs.
std::unique_ptr<Functional> functional_from_config(const nlohmann::json& config, const LayerFromJson& make_layer,
                                                   std::optional<std::uint64_t> seed, const std::string& source);

}  // namespace lockstep::detail
