#pragma once
// Keras 3's advanced activation layers (keras/src/layers/activations/): ReLU, LeakyReLU, ELU and
// PReLU, with Keras' names, arguments and defaults. Each keeps its input's mask (Keras'
// supports_masking) and computes in the layer's compute dtype (the activations compute a 16-bit
// input in float32: layers/activations.hpp).
#include <optional>
#include <vector>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// ReLU(max_value=None, negative_slope=0.0, threshold=0.0): Keras' activations.relu with these
/// arguments (x above threshold, else negative_slope * (x - threshold); clipped to max_value).
/// A negative argument is Keras' ValueError.
class ReLULayer final : public Layer {
 public:
  ReLULayer(std::optional<float> max_value = std::nullopt, float negative_slope = 0.0f, float threshold = 0.0f,
            std::string name = "");
  std::string class_name() const override { return "ReLU"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  std::optional<float> max_value_;
  float negative_slope_, threshold_;
};

/// LeakyReLU(negative_slope=0.3) (the layer's Keras default; the function's is 0.2).
class LeakyReLULayer final : public Layer {
 public:
  explicit LeakyReLULayer(float negative_slope = 0.3f, std::string name = "");
  std::string class_name() const override { return "LeakyReLU"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  float negative_slope_;
};

/// ELU(alpha=1.0). Keras' get_config leaves alpha out (a file Keras writes loads as 1.0, as in
/// Keras); lockstep writes it, which Keras' ELU(**config) takes.
class ELULayer final : public Layer {
 public:
  explicit ELULayer(float alpha = 1.0f, std::string name = "");
  std::string class_name() const override { return "ELU"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

 private:
  float alpha_;
};

/// PReLU(alpha_initializer="zeros", shared_axes=None): relu(x) - alpha * relu(-x) with a trainable
/// weight "alpha" of the input's per-example shape, 1 along each of shared_axes (1-based, the
/// batch is axis 0, as Keras'), broadcast there.
class PReLULayer final : public Layer {
 public:
  explicit PReLULayer(std::string alpha_initializer = "zeros", std::vector<int> shared_axes = {},
                      std::string name = "");
  std::string class_name() const override { return "PReLU"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const Variable& alpha() const { return alpha_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  std::string alpha_initializer_;
  std::vector<int> shared_axes_;
  Variable alpha_;
};

LayerPtr ReLU(std::optional<float> max_value = std::nullopt, float negative_slope = 0.0f, float threshold = 0.0f);
LayerPtr LeakyReLU(float negative_slope = 0.3f);
LayerPtr ELU(float alpha = 1.0f);
LayerPtr PReLU(const std::string& alpha_initializer = "zeros", std::vector<int> shared_axes = {});

}  // namespace lockstep::layers
