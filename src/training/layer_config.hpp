#pragma once
// A layer as {"class_name", "config"} JSON with Keras' class and argument names: what saved
// models write and read for each registered layer class (lockstep/layers/layer_registry.hpp).
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/layers/layer_registry.hpp"

namespace lockstep::detail {

/// Keras' to_snake_case of a class name ("MaxPooling2D" -> "max_pooling2d"): default layer names,
/// and the names of layers' groups in Keras weight files.
std::string snake_case(const std::string& class_name);

/// Keras writes an unknown (batch) dimension as null.
using layers::shape_from_json;
using layers::shape_to_json;

/// Throws ValueError naming the layer when its class is not registered.
nlohmann::json layer_to_json(const layers::Layer& layer);
/// Throws IOError naming an unknown class_name (and the classes known), or the layer and its
/// class's reason where the config is not one the class takes (a missing or mistyped argument).
layers::LayerPtr layer_from_json(const nlohmann::json& j);

/// "argument units=128.5 is not an integer ..." for the first argument of `given` (a layer's
/// config as read) that `built` (the layer's get_config()) holds as an integer (or a list of them)
/// but was given as a fraction or past 2^31; "" when there is none.
std::string non_integer_argument(const nlohmann::json& given, const nlohmann::json& built);
/// "argument units=1e+30 is out of range ..." for the first fractional number (or list of them)
/// of `given` at or past 2^31 in size, which nlohmann would convert to an integer with undefined
/// behaviour; "" when there is none. Checked before a layer is made from `given`.
std::string out_of_range_argument(const nlohmann::json& given);

}  // namespace lockstep::detail
