#include "lockstep/layers/merge_layers.hpp"

#include <nlohmann/json.hpp>

namespace lockstep::layers {

std::string MergeLayer::shapes_str(const std::vector<Shape>& shapes) {
  std::string s = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shapes[i].str();
  return s + "]";
}

void MergeLayer::check_list(const std::vector<Shape>& shapes) const {
  LOCKSTEP_CHECK(shapes.size() >= 2, "layer '", name(), "' (", class_name(),
                 ") should be called on a list of at least 2 inputs, got ", shapes.size());
}

void MergeLayer::build_merge(const std::vector<Shape>& shapes, std::uint64_t seed) {
  (void)merge_output_shape(shapes);
  build(shapes.front(), seed);
}

Shape MergeLayer::compute_output_shape(const Shape& s) const {
  throw ValueError("layer '" + name() + "' (" + class_name() + ") merges a list of tensors but is given one, of shape " +
                   s.str() + "; call it on a list in a functional model: lockstep::call(layer, {a, b})");
}

Tensor MergeLayer::call(const Tensor& x, const CallContext&) const {
  (void)compute_output_shape(x.shape());  // throws
  return {};
}

Shape AddLayer::merge_output_shape(const std::vector<Shape>& shapes) const {
  check_list(shapes);
  for (const auto& s : shapes)
    LOCKSTEP_CHECK(s.tail() == shapes.front().tail() && s.rank() == shapes.front().rank(), "layer '", name(),
                   "' (Add) needs inputs of one shape, got ", shapes_str(shapes));
  return shapes.front();
}

Tensor AddLayer::merge(const std::vector<Tensor>& inputs, const CallContext&) const {
  std::vector<Shape> shapes;
  for (const auto& x : inputs) shapes.push_back(x.shape());
  (void)merge_output_shape(shapes);
  // Left to right, as Keras' Add: the same rounding on every replica and every run.
  Tensor y = autocast(inputs[0]);
  for (std::size_t i = 1; i < inputs.size(); ++i) y = add(y, autocast(inputs[i]));
  return y;
}

LayerPtr AddLayer::from_config(const nlohmann::json& c) {
  return std::make_shared<AddLayer>(c.at("name").get<std::string>());
}

LayerPtr Add() { return std::make_shared<AddLayer>(); }

}  // namespace lockstep::layers
