#pragma once
// Keras 3's GroupNormalization and UnitNormalization (keras/src/layers/normalization/): like
// LayerNormalization, each example is normalised with its own statistics only, so training and
// inference compute the same and replicas need no all-reduce. Composed of recorded ops, so every
// backend runs them and the tape differentiates them. As Keras' GroupNormalization (and lockstep's
// LayerNormalization), 16-bit inputs are normalised in float32 and the output cast back.
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

struct GroupNormalizationOptions {
  /// Channel groups: a divisor of the channels; -1 is one group per channel (instance normalisation).
  std::int64_t groups = 32;
  /// The channels' axis, counted from the first (1: channels_first) or from the last (-1); not the batch's.
  int axis = -1;
  float epsilon = 1e-3f;
  bool center = true;  // beta
  bool scale = true;   // gamma
  std::string beta_initializer = "zeros";
  std::string gamma_initializer = "ones";
  std::string name;
};

/// Keras' GroupNormalization: the channels are split into `groups` groups of consecutive channels;
/// each (example, group) is normalised over the group's channels and every other axis but the
/// batch, with its mean and (biased) variance: (x - mean) / sqrt(variance + epsilon), then scaled by
/// gamma and shifted by beta, one of each per channel.
class GroupNormalizationLayer final : public Layer {
 public:
  explicit GroupNormalizationLayer(const GroupNormalizationOptions& options = {});
  std::string class_name() const override { return "GroupNormalization"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const GroupNormalizationOptions& options() const { return options_; }
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  int channel_axis(std::size_t rank) const;
  GroupNormalizationOptions options_;
  std::int64_t groups_ = 0;  // as built (-1 resolved to the channels)
  Variable gamma_, beta_;
};

/// Keras' UnitNormalization: each example scaled to unit L2 norm over `axes` (Keras' ops.normalize
/// with order 2: x * min(1 / sqrt(sum(x^2)), 1e12)), the sum over every axis listed (-1: the last).
class UnitNormalizationLayer final : public Layer {
 public:
  /// axes: one or more axes after the batch's; axis_is_list says whether Keras' config gives a list.
  explicit UnitNormalizationLayer(std::vector<int> axes = {-1}, bool axis_is_list = false, std::string name = "");
  std::string class_name() const override { return "UnitNormalization"; }
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  const std::vector<int>& axes() const { return axes_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  std::vector<int> axes_;
  bool axis_is_list_;
};

LayerPtr GroupNormalization(const GroupNormalizationOptions& options = {});
LayerPtr UnitNormalization(std::vector<int> axes = {-1});

}  // namespace lockstep::layers
