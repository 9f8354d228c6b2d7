#include "training/layer_config.hpp"

#include <cctype>

#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/merge_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"

namespace lockstep::detail {

namespace {
using nlohmann::json;

constexpr const char* kLayerClasses =
    "Dense, Dropout, Activation, Flatten, Reshape, InputLayer, Conv2D, DepthwiseConv2D, MaxPooling2D, "
    "AveragePooling2D, GlobalAveragePooling2D, ZeroPadding2D, Rescaling, BatchNormalization, Add";

layers::Pair pair_from_json(const json& j) {
  // Keras accepts an int for a square window.
  if (j.is_number_integer()) return {j.get<std::int64_t>(), j.get<std::int64_t>()};
  const auto v = j.get<std::vector<std::int64_t>>();
  if (v.size() != 2) throw json::type_error::create(302, "expected 2 integers, got " + j.dump(), &j);
  return {v[0], v[1]};
}
json pair_to_json(const layers::Pair& p) { return json::array({p[0], p[1]}); }
}  // namespace

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

json shape_to_json(const Shape& s) {
  json j = json::array();
  for (auto d : s.dims()) j.push_back(d < 0 ? json(nullptr) : json(d));
  return j;
}

Shape shape_from_json(const json& j) {
  if (!j.is_array()) throw json::type_error::create(302, "a shape must be a list, got " + j.dump(), &j);
  std::vector<std::int64_t> dims;
  for (const auto& d : j) dims.push_back(d.is_null() ? -1 : d.get<std::int64_t>());
  return Shape(std::move(dims));
}

json layer_to_json(const layers::Layer& l) {
  json config = {{"name", l.name()}};
  if (const auto* d = dynamic_cast<const layers::DenseLayer*>(&l)) {
    const auto& o = d->options();
    config["units"] = o.units;
    config["activation"] = layers::activation_name(layers::parse_activation(o.activation));
    config["use_bias"] = o.use_bias;
    config["kernel_initializer"] = o.kernel_initializer;
    config["bias_initializer"] = o.bias_initializer;
    if (o.input_dim) config["input_dim"] = *o.input_dim;
  } else if (const auto* dr = dynamic_cast<const layers::DropoutLayer*>(&l)) {
    config["rate"] = dr->rate();
  } else if (const auto* a = dynamic_cast<const layers::ActivationLayer*>(&l)) {
    config["activation"] = layers::activation_name(a->kind());
  } else if (dynamic_cast<const layers::FlattenLayer*>(&l) != nullptr) {
  } else if (const auto* r = dynamic_cast<const layers::ReshapeLayer*>(&l)) {
    config["target_shape"] = r->target_shape().dims();
  } else if (dynamic_cast<const layers::InputLayer*>(&l) != nullptr) {
    config["shape"] = l.declared_input_shape()->dims();
  } else if (const auto* c = dynamic_cast<const layers::Conv2DLayer*>(&l)) {
    const auto& o = c->options();
    config.update({{"filters", o.filters}, {"kernel_size", pair_to_json(o.kernel_size)},
                   {"strides", pair_to_json(o.strides)}, {"padding", o.padding},
                   {"dilation_rate", pair_to_json(o.dilation_rate)}, {"groups", o.groups},
                   {"activation", layers::activation_name(layers::parse_activation(o.activation))},
                   {"use_bias", o.use_bias}, {"kernel_initializer", o.kernel_initializer},
                   {"bias_initializer", o.bias_initializer}});
  } else if (const auto* dc = dynamic_cast<const layers::DepthwiseConv2DLayer*>(&l)) {
    const auto& o = dc->options();
    config.update({{"kernel_size", pair_to_json(o.kernel_size)}, {"strides", pair_to_json(o.strides)},
                   {"padding", o.padding}, {"depth_multiplier", o.depth_multiplier},
                   {"dilation_rate", pair_to_json(o.dilation_rate)},
                   {"activation", layers::activation_name(layers::parse_activation(o.activation))},
                   {"use_bias", o.use_bias}, {"depthwise_initializer", o.depthwise_initializer},
                   {"bias_initializer", o.bias_initializer}});
  } else if (const auto* p = dynamic_cast<const layers::Pooling2DLayer*>(&l)) {
    config.update({{"pool_size", pair_to_json(p->options().pool_size)}, {"strides", pair_to_json(p->strides())},
                   {"padding", p->options().padding}});
  } else if (const auto* g = dynamic_cast<const layers::GlobalAveragePooling2DLayer*>(&l)) {
    config["keepdims"] = g->keepdims();
  } else if (const auto* z = dynamic_cast<const layers::ZeroPadding2DLayer*>(&l)) {
    config["padding"] = json::array({pair_to_json(z->padding()[0]), pair_to_json(z->padding()[1])});
  } else if (const auto* rs = dynamic_cast<const layers::RescalingLayer*>(&l)) {
    config["scale"] = rs->scale();
    config["offset"] = rs->offset();
  } else if (const auto* bn = dynamic_cast<const layers::BatchNormalizationLayer*>(&l)) {
    const auto& o = bn->options();
    config.update({{"axis", -1}, {"momentum", o.momentum}, {"epsilon", o.epsilon}, {"center", o.center},
                   {"scale", o.scale}, {"beta_initializer", o.beta_initializer},
                   {"gamma_initializer", o.gamma_initializer},
                   {"moving_mean_initializer", o.moving_mean_initializer},
                   {"moving_variance_initializer", o.moving_variance_initializer},
                   {"synchronized", o.synchronized}});
  } else if (dynamic_cast<const layers::AddLayer*>(&l) != nullptr) {
  } else {
    throw ValueError("save_model: layer '" + l.name() + "' is a " + l.class_name() +
                     ", which saved models cannot describe yet (supported: " + kLayerClasses + ")");
  }
  return {{"class_name", l.class_name()}, {"config", config}};
}

layers::LayerPtr layer_from_json(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  const auto name = c.at("name").get<std::string>();
  if (cls == "Dense") {
    layers::DenseOptions o;
    o.units = c.at("units").get<std::int64_t>();
    o.activation = c.at("activation").get<std::string>();
    o.use_bias = c.at("use_bias").get<bool>();
    o.kernel_initializer = c.at("kernel_initializer").get<std::string>();
    o.bias_initializer = c.at("bias_initializer").get<std::string>();
    if (c.contains("input_dim")) o.input_dim = c.at("input_dim").get<std::int64_t>();
    o.name = name;
    return std::make_shared<layers::DenseLayer>(o);
  }
  if (cls == "Dropout") return std::make_shared<layers::DropoutLayer>(c.at("rate").get<float>(), name);
  if (cls == "Activation") return std::make_shared<layers::ActivationLayer>(c.at("activation").get<std::string>(), name);
  if (cls == "Flatten") return std::make_shared<layers::FlattenLayer>(name);
  if (cls == "Reshape") return std::make_shared<layers::ReshapeLayer>(shape_from_json(c.at("target_shape")), name);
  if (cls == "InputLayer") return std::make_shared<layers::InputLayer>(shape_from_json(c.at("shape")), name);
  if (cls == "Conv2D") {
    layers::Conv2DOptions o;
    o.filters = c.at("filters").get<std::int64_t>();
    o.kernel_size = pair_from_json(c.at("kernel_size"));
    o.strides = pair_from_json(c.at("strides"));
    o.padding = c.at("padding").get<std::string>();
    o.dilation_rate = pair_from_json(c.at("dilation_rate"));
    o.groups = c.at("groups").get<std::int64_t>();
    o.activation = c.at("activation").get<std::string>();
    o.use_bias = c.at("use_bias").get<bool>();
    o.kernel_initializer = c.at("kernel_initializer").get<std::string>();
    o.bias_initializer = c.at("bias_initializer").get<std::string>();
    o.name = name;
    return std::make_shared<layers::Conv2DLayer>(o);
  }
  if (cls == "DepthwiseConv2D") {
    layers::DepthwiseConv2DOptions o;
    o.kernel_size = pair_from_json(c.at("kernel_size"));
    o.strides = pair_from_json(c.at("strides"));
    o.padding = c.at("padding").get<std::string>();
    o.depth_multiplier = c.at("depth_multiplier").get<std::int64_t>();
    o.dilation_rate = pair_from_json(c.at("dilation_rate"));
    o.activation = c.at("activation").get<std::string>();
    o.use_bias = c.at("use_bias").get<bool>();
    o.depthwise_initializer = c.at("depthwise_initializer").get<std::string>();
    o.bias_initializer = c.at("bias_initializer").get<std::string>();
    o.name = name;
    return std::make_shared<layers::DepthwiseConv2DLayer>(o);
  }
  if (cls == "MaxPooling2D" || cls == "AveragePooling2D") {
    return std::make_shared<layers::Pooling2DLayer>(
        cls == "MaxPooling2D", layers::Pooling2DOptions{pair_from_json(c.at("pool_size")),
                                                        pair_from_json(c.at("strides")),
                                                        c.at("padding").get<std::string>(), name});
  }
  if (cls == "GlobalAveragePooling2D")
    return std::make_shared<layers::GlobalAveragePooling2DLayer>(c.value("keepdims", false), name);
  if (cls == "ZeroPadding2D") {
    const json& p = c.at("padding");
    if (!p.is_array() || p.size() != 2) throw json::type_error::create(302, "padding must be ((t, b), (l, r))", &p);
    return std::make_shared<layers::ZeroPadding2DLayer>(
        std::array<layers::Pair, 2>{pair_from_json(p[0]), pair_from_json(p[1])}, name);
  }
  if (cls == "Rescaling")
    return std::make_shared<layers::RescalingLayer>(c.at("scale").get<float>(), c.value("offset", 0.0f), name);
  if (cls == "BatchNormalization") {
    const json& axis = c.value("axis", json(-1));
    if (axis != json(-1) && axis != json::array({-1}))
      throw IOError("BatchNormalization axis " + axis.dump() + " is not supported (only the last axis, -1)");
    layers::BatchNormalizationOptions o;
    o.momentum = c.at("momentum").get<float>();
    o.epsilon = c.at("epsilon").get<float>();
    o.center = c.at("center").get<bool>();
    o.scale = c.at("scale").get<bool>();
    o.beta_initializer = c.at("beta_initializer").get<std::string>();
    o.gamma_initializer = c.at("gamma_initializer").get<std::string>();
    o.moving_mean_initializer = c.at("moving_mean_initializer").get<std::string>();
    o.moving_variance_initializer = c.at("moving_variance_initializer").get<std::string>();
    o.synchronized = c.value("synchronized", false);
    o.name = name;
    return std::make_shared<layers::BatchNormalizationLayer>(o);
  }
  if (cls == "Add") return std::make_shared<layers::AddLayer>(name);
  throw IOError("unknown layer class_name '" + cls + "' (lockstep knows " + kLayerClasses + ")");
}

}  // namespace lockstep::detail
