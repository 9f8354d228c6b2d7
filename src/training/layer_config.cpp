#include "training/layer_config.hpp"

#include <cctype>

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
  return {{"class_name", l.class_name()}, {"config", l.get_config()}};
}

layers::LayerPtr layer_from_json(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const auto found = layers::find_layer_class(cls);
  if (!found) throw IOError("unknown layer class_name '" + cls + "' (lockstep knows " + layers::layer_class_names() + ")");
  return found->from_config(j.at("config"));
}

}  // namespace lockstep::detail
