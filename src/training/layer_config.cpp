#include "training/layer_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

namespace lockstep::detail {

using nlohmann::json;

// Keras' to_snake_case: a capital starts a word when a lowercase letter follows it or precedes
// it, so "Conv2D" is "conv2d" and "MaxPooling2D" is "max_pooling2d".
std::string snake_case(const std::string& s) {
  std::string out;
  const auto lower = [&](std::size_t i) { return i < s.size() && std::islower(static_cast<unsigned char>(s[i])); };
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (std::isupper(c) && i > 0 && (lower(i + 1) || lower(i - 1))) out += '_';
    out += static_cast<char>(std::tolower(c));
  }
  return out;
}

json layer_to_json(const layers::Layer& l) {
  if (!layers::find_layer_class(l.class_name()))
    throw ValueError("save_model: layer '" + l.name() + "' is a " + l.class_name() +
                     ", which saved models cannot describe yet (supported: " + layers::layer_class_names() +
                     "; layers::register_layer_class adds a class)");
  json config = l.get_config();
  if (!l.trainable()) config["trainable"] = false;  // a frozen layer (Keras' key); true is left out, as before
  return {{"class_name", l.class_name()}, {"config", std::move(config)}};
}

layers::LayerPtr layer_from_json(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const auto found = layers::find_layer_class(cls);
  if (!found) throw IOError("unknown layer class_name '" + cls + "' (lockstep knows " + layers::layer_class_names() + ")");
  json config = j.at("config");
  if (const std::string bad = out_of_range_argument(config); !bad.empty())
    throw IOError("layer '" + config.value("name", std::string("?")) + "' (" + cls + "): " + bad);
  const json trainable = config.value("trainable", json(true));
  if (!trainable.is_boolean())
    throw IOError("layer '" + config.value("name", std::string("?")) + "' (" + cls + "): trainable=" + trainable.dump() +
                  " is not a boolean");
  config.erase("trainable");  // the base Layer's, not the class's argument
  layers::LayerPtr layer;
  try {
    layer = found->from_config(config);
  } catch (const ValueError& e) {  // the class's config reader: an argument mistyped or missing
    const json& name = config.value("name", json());
    throw IOError("layer '" + (name.is_string() ? name.get<std::string>() : std::string("?")) + "' (" + cls +
                  "): " + e.what());
  }
  layer->set_trainable(trainable.get<bool>());
  const std::string bad = non_integer_argument(config, layer->get_config());
  if (!bad.empty())
    throw IOError("layer '" + layer->name() + "' (" + cls + "): " + bad);
  return layer;
}

namespace {
// An integer argument past 2^31 (no layer's real argument), or a fraction where the layer holds an
// integer (which the layers' config reader refuses first), caught by comparing given and built.
std::string integer_problem(const json& given, const json& built) {
  if (built.is_array() && given.is_array() && built.size() == given.size()) {
    for (std::size_t i = 0; i < built.size(); ++i)
      if (!integer_problem(given[i], built[i]).empty()) return given.dump();
    return "";
  }
  if (!built.is_number_integer() || !given.is_number()) return "";
  if (!given.is_number_integer()) return given.dump();
  const auto v = given.get<std::int64_t>();
  constexpr std::int64_t kBound = std::int64_t{1} << 31;
  return v >= kBound || v < -kBound || (given.is_number_unsigned() && given.get<std::uint64_t>() >= kBound)
             ? given.dump()
             : "";
}
}  // namespace

std::string out_of_range_argument(const json& given) {
  if (!given.is_object()) return "";
  constexpr double kBound = 2147483648.0;  // 2^31
  for (const auto& [key, value] : given.items()) {
    const auto huge = [&](const json& v) { return v.is_number_float() && !(std::fabs(v.get<double>()) < kBound); };
    if (huge(value) || (value.is_array() && std::any_of(value.begin(), value.end(), huge)))
      return "argument " + key + "=" + value.dump() + " is out of range (no layer argument reaches 2^31)";
  }
  return "";
}

std::string non_integer_argument(const json& given, const json& built) {
  if (!given.is_object() || !built.is_object()) return "";
  for (const auto& [key, value] : built.items()) {
    if (!given.contains(key)) continue;
    const std::string v = integer_problem(given.at(key), value);
    if (!v.empty()) return "argument " + key + "=" + v + " is not an integer the layer can take (" + key + " is " +
                           value.dump() + " as read)";
  }
  return "";
}

}  // namespace lockstep::detail
