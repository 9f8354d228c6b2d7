#pragma once
// LayerNormalization with Keras 3's arguments and defaults: each example is normalised over its
// last axis (its features) with its own mean and (biased) variance, then scaled by gamma and
// shifted by beta, one of each per feature. No batch statistics, so training and inference
// compute the same, and replicas need no all-reduce. As Keras 3, 16-bit inputs are normalised
// in float32 and the output is cast back.
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

struct LayerNormalizationOptions {
  float epsilon = 1e-3f;
  bool center = true;  // beta
  bool scale = true;   // gamma
  std::string beta_initializer = "zeros";
  std::string gamma_initializer = "ones";
  std::string name;
};

class LayerNormalizationLayer final : public Layer {
 public:
  explicit LayerNormalizationLayer(const LayerNormalizationOptions& options = {});
  std::string class_name() const override { return "LayerNormalization"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  /// axis must be -1 (or [-1]): lockstep normalises over the last axis only.
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const LayerNormalizationOptions& options() const { return options_; }
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  LayerNormalizationOptions options_;
  Variable gamma_, beta_;
};

LayerPtr LayerNormalization(const LayerNormalizationOptions& options = {});

}  // namespace lockstep::layers
