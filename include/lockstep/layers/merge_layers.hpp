#pragma once
// Merge layers: a layer that takes a list of tensors (Keras' Merge base class) — Add, Multiply,
// Subtract, Average, Maximum, Minimum, Concatenate, Dot. They are
// called on a list in a functional model (lockstep::call(layers::Add(), {a, b})); given one tensor
// (in a Sequential) they throw ValueError naming the layer.
#include <array>

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
  /// The output's mask given the inputs' (undefined: none; see Layer::compute_mask), as Keras'
  /// Merge (element-wise merges, Keras 3's rule): none where an input has none, else the steps
  /// any input keeps.
  virtual Tensor merge_mask(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks) const;

  // One tensor is not a list: an error naming the layer.
  Shape compute_output_shape(const Shape& input_shape) const final;
  Tensor call(const Tensor& x, const CallContext& ctx) const final;
  /// A call on a list: merge(inputs).
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, const CallArguments& args,
                                   const CallContext& ctx) const override;

 protected:
  /// ValueError unless there are at least two shapes of the same rank; "[a, b, ...]" for messages.
  void check_list(const std::vector<Shape>& input_shapes) const;
  /// check_list, then ValueError unless every shape is the first one: that shape.
  Shape check_same_shapes(const std::vector<Shape>& input_shapes) const;
  /// The inputs' shapes checked by merge_output_shape, then the inputs autocast.
  std::vector<Tensor> checked_inputs(const std::vector<Tensor>& inputs) const;
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

/// Keras' Multiply, Subtract (exactly two inputs: a - b), Average, Maximum and Minimum: element-wise
/// over inputs of one shape, combined left to right.
class ElementwiseMergeLayer final : public MergeLayer {
 public:
  enum class Kind { kMultiply, kSubtract, kAverage, kMaximum, kMinimum };
  explicit ElementwiseMergeLayer(Kind kind, std::string name = "") : MergeLayer(std::move(name)), kind_(kind) {}
  std::string class_name() const override;
  static LayerPtr from_config(Kind kind, const nlohmann::json& config);
  Shape merge_output_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const override;

 private:
  Kind kind_;
};

/// Keras' Concatenate: inputs equal but along `axis` (not the batch's), joined along it in order.
class ConcatenateLayer final : public MergeLayer {
 public:
  explicit ConcatenateLayer(int axis = -1, std::string name = "");
  std::string class_name() const override { return "Concatenate"; }
  /// Keras 3's: along the last axis, the steps any input keeps (an unmasked input keeps all: then
  /// a mask of ones); along another, the masks concatenated (an unmasked input's all ones). None
  /// where no input has a mask.
  Tensor merge_mask(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks) const override;
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape merge_output_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const override;

 private:
  int axis_;
};

/// Keras' Dot: per example, the dot products of two inputs along axes[0] of the first and axes[1]
/// of the second (after the batch). For [b, d] and [b, d]: [b, 1]; for [b, t, d] and [b, s, d] with
/// axes (2, 2): [b, t, s]. Inputs of rank 2 or 3, of one rank. `normalize`: each input is first
/// L2-normalised along its axis (cosine similarity).
class DotLayer final : public MergeLayer {
 public:
  explicit DotLayer(std::array<int, 2> axes, bool normalize = false, std::string name = "");
  std::string class_name() const override { return "Dot"; }
  Tensor merge_mask(const std::vector<Tensor>&, const std::vector<Tensor>&) const override { return Tensor(); }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape merge_output_shape(const std::vector<Shape>& input_shapes) const override;
  Tensor merge(const std::vector<Tensor>& inputs, const CallContext& ctx) const override;

 private:
  std::array<int, 2> axes_for(std::size_t rank) const;
  std::array<int, 2> axes_;
  bool normalize_;
};

LayerPtr Add();
LayerPtr Multiply();
LayerPtr Subtract();
LayerPtr Average();
LayerPtr Maximum();
LayerPtr Minimum();
LayerPtr Concatenate(int axis = -1);
/// One axis for both inputs (Keras' Dot(axes=n)).
LayerPtr Dot(int axes, bool normalize = false);
LayerPtr Dot(std::array<int, 2> axes, bool normalize = false);

}  // namespace lockstep::layers
