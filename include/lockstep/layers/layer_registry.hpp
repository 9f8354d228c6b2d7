#pragma once
// Keras' serialisation contract for layers: a layer gives its arguments with get_config(), and
// its class, registered under Keras' class name, makes it again from them (from_config). Saved
// models (lockstep's folder and Keras' .keras archive) read and write layers only through this
// registry, so a new layer is its own files plus one row (or one register_layer_class call).
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

struct LayerClass {
  /// Keras' class name, as Layer::class_name() gives it.
  std::string class_name;
  /// The layer that get_config()'s JSON describes. Throws nlohmann's exceptions for a missing or
  /// mistyped argument and lockstep's errors for a value the layer refuses.
  std::function<LayerPtr(const nlohmann::json& config)> from_config;
  /// Arguments Keras' class has that lockstep's layer fixes (e.g. data_format "channels_last"):
  /// .keras files get them as given; on reading one, the same value or Keras' "off" (null) passes.
  nlohmann::json keras_fixed = nlohmann::json::object();
  /// Keras' common layer arguments this class's Keras constructor does not take, left out of the
  /// .keras files lockstep writes (Keras' SpatialDropout1D(rate, seed, name, dtype) refuses a
  /// "trainable"; it cannot be frozen there).
  std::vector<std::string> keras_not_taken = {};
};

/// The registered class named `class_name`, if any (lockstep's layers are registered from the start).
std::optional<LayerClass> find_layer_class(const std::string& class_name);
/// "Activation, Add, ..." — the registered class names, for messages.
std::string layer_class_names();
/// Registers a layer class (e.g. a custom layer) so that saved models can hold it; ValueError when
/// its name is empty, already taken or it has no from_config.
void register_layer_class(LayerClass layer_class);

/// A shape as Keras writes one: an unknown (-1) dimension is null.
nlohmann::json shape_to_json(const Shape& s);
/// The reverse of shape_to_json; nlohmann's type_error when `j` is not a list of integers and nulls.
Shape shape_from_json(const nlohmann::json& j);

/// A normalisation layer's axis argument: absent, -1 or [-1] (lockstep's normalise over the last
/// axis only), else ValueError naming the class.
void check_last_axis(const nlohmann::json& config, const std::string& class_name);

}  // namespace lockstep::layers
