#pragma once
// Merge layers: a layer that takes a list of tensors (Keras' Merge base class) — Add. They are
// called on a list in a functional model (lockstep::call(layers::Add(), {a, b})); given one tensor
// (in a Sequential) they throw ValueError naming the layer.
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

class MergeLayer : public Layer {
 public:
  using Layer::Layer;

  /// The output shape for these input shapes (batch dimension -1): ValueError naming the layer and
  /// every shape when they cannot be merged, or when fewer than two are given.
  virtual Shape merge_output_shape(const std::vector<Shape>& input_shapes) const = 0;
  /// The merged tensor of `inputs` (their shapes as merge_output_shape accepts).
  virtual Tensor merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const = 0;
  /// Checks the shapes, then builds as Layer::build does for the first one.
  void build_merge(const std::vector<Shape>& input_shapes, std::uint64_t seed);

  // One tensor is not a list: an error naming the layer.
  Shape compute_output_shape(const Shape& input_shape) const final;
  Tensor call(const Tensor& x, const CallContext& ctx) const final;

 protected:
  /// ValueError unless there are at least two shapes of the same rank; "[a, b, ...]" for messages.
  void check_list(const std::vector<Shape>& input_shapes) const;
  static std::string shapes_str(const std::vector<Shape>& input_shapes);
};

/// Element-wise sum of inputs of one shape (Keras' Add; no broadcasting). Its gradient passes
/// the output's gradient to every input.
class AddLayer final : public MergeLayer {
 public:
  explicit AddLayer(std::string name = "") : MergeLayer(std::move(name)) {}
  std::string class_name() const override { return "Add"; }
  static LayerPtr from_config(const nlohmann::json& config);
  Shape merge_output_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const override;
};

LayerPtr Add();

}  // namespace lockstep::layers
