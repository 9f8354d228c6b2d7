#pragma once
// Dense, Dropout, Activation, Flatten, Reshape, Softmax, Masking, Input, with Keras' names and defaults.
#include "lockstep/layers/layer.hpp"
#include "lockstep/layers/regularization_layers.hpp"  // Dropout's base

namespace lockstep::layers {

struct DenseOptions {
  std::int64_t units = 0;
  std::string activation = "linear";
  bool use_bias = true;
  std::string kernel_initializer = "glorot_uniform";
  std::string bias_initializer = "zeros";
  std::optional<std::int64_t> input_dim;
  std::string name;
  /// The layer's dtype policy by name (Keras' dtype=); empty: the global policy.
  std::string dtype;
};

class DenseLayer final : public Layer {
 public:
  explicit DenseLayer(const DenseOptions& options);
  std::string class_name() const override { return "Dense"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool has_softmax_output() const override { return activation_ == ActivationKind::kSoftmax; }
  Tensor call_logits(const Tensor& x, const CallContext& ctx) const override;
  const DenseOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  Tensor linear(const Tensor& x, bool fuse_relu) const;
  DenseOptions options_;
  ActivationKind activation_;
  Variable kernel_, bias_;
};

/// Keras' Dropout (keras/src/layers/regularization/dropout.py): inverted dropout, each unit kept
/// with probability 1 - rate and scaled by 1 / (1 - rate), in training; rate in [0, 1).
/// noise_shape: the mask's shape (NoiseShape's), broadcast over the input (e.g. (None, 1, C):
/// whole channels dropped over time); seed: the layer's own stream of draws.
class DropoutLayer final : public RandomRegularizationLayer {
 public:
  explicit DropoutLayer(float rate, std::vector<std::int64_t> noise_shape = {},
                        std::optional<std::int64_t> seed = std::nullopt, std::string name = "");
  std::string class_name() const override { return "Dropout"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  float rate() const { return amount(); }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
  NoiseShape noise_shape_;
};

class ActivationLayer final : public Layer {
 public:
  explicit ActivationLayer(const std::string& activation, std::string name = "");
  std::string class_name() const override { return "Activation"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool has_softmax_output() const override { return kind_ == ActivationKind::kSoftmax; }
  Tensor call_logits(const Tensor& x, const CallContext&) const override { return autocast(x); }
  ActivationKind kind() const { return kind_; }

 private:
  ActivationKind kind_;
};

class FlattenLayer final : public Layer {
 public:
  explicit FlattenLayer(std::string name = "") : Layer(std::move(name)) {}
  std::string class_name() const override { return "Flatten"; }
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
};

class ReshapeLayer final : public Layer {
 public:
  /// target_shape excludes the batch dimension; one entry may be -1.
  explicit ReshapeLayer(Shape target_shape, std::string name = "");
  std::string class_name() const override { return "Reshape"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const Shape& target_shape() const { return target_; }

 private:
  Shape target_;
};

/// Keras' Softmax layer: softmax over `axis` (-1, the last, by default). Given a mask (its input's,
/// or the call's own: CallKwargs::mask), Keras 3's masked softmax (keras/src/layers/activations/
/// softmax.py): a position is kept where the mask is nonzero (a floating mask: > 0.5), the others
/// enter as -1e9 (-3e4 in float16) and come out 0; the mask broadcasts against the input from the
/// last axis (check_call_mask). The output keeps the mask it was given (Keras' previous_mask).
class SoftmaxLayer final : public Layer {
 public:
  explicit SoftmaxLayer(int axis = -1, std::string name = "");
  std::string class_name() const override { return "Softmax"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  bool supports_masking() const override { return true; }
  bool call_takes_mask() const override { return true; }
  Tensor call_masked(const Tensor& x, const Tensor& mask, const CallContext& ctx) const override;
  /// Keras' rule: no more axes than the input, each of the mask's last axes 1 or the input's. So
  /// an Embedding(mask_zero)'s [batch, steps] mask does not fit its [batch, steps, features]
  /// output (unless the sizes happen to line up): Keras' ValueError, raised by the call.
  void check_call_mask(const Shape& mask, const Shape& input) const override;
  /// Over the last axis, a final Softmax gives the loss its logits (stable cross-entropy).
  bool has_softmax_output() const override { return axis_ == -1; }
  Tensor call_logits(const Tensor& x, const CallContext&) const override { return autocast(x); }
  int axis() const { return axis_; }

 private:
  int axis_;
};

/// Keras' Masking (keras/src/layers/core/masking.py): a step whose features all equal
/// `mask_value` is masked. The output's mask is any(x != mask_value, axis=-1), whatever mask the
/// input had, and the call sets the masked steps to 0. Inputs of rank 2 or more; mask_value must
/// be finite (a masked step is zeroed by multiplying it by the mask: ValueError otherwise).
class MaskingLayer final : public Layer {
 public:
  explicit MaskingLayer(float mask_value = 0.0f, std::string name = "");
  std::string class_name() const override { return "Masking"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  Tensor compute_mask(const Tensor& x, const Tensor& mask) const override;
  /// x with the steps of output_mask zeroed: the mask a model computed before the call, computed
  /// here only where it did not (call() itself).
  Tensor call_with_output_mask(const Tensor& x, const Tensor& mask, const Tensor& output_mask,
                               const CallContext& ctx) const override;
  float mask_value() const { return mask_value_; }

 private:
  float mask_value_;
};

/// Declares the model's input shape (without the batch dimension); passes its input through.
class InputLayer final : public Layer {
 public:
  explicit InputLayer(Shape shape, std::string name = "");
  std::string class_name() const override { return "InputLayer"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext&) const override { return x; }
};

// Keras-style factories.
LayerPtr Dense(std::int64_t units, const std::string& activation = "linear",
               std::optional<std::int64_t> input_dim = std::nullopt);
LayerPtr Dense(const DenseOptions& options);
LayerPtr Dropout(float rate, std::vector<std::int64_t> noise_shape = {},
                 std::optional<std::int64_t> seed = std::nullopt);
LayerPtr Activation(const std::string& activation);
LayerPtr Softmax(int axis = -1);
LayerPtr Masking(float mask_value = 0.0f);
LayerPtr Flatten();
LayerPtr Reshape(Shape target_shape);
LayerPtr Input(Shape shape);

}  // namespace lockstep::layers
