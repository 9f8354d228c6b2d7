#pragma once
// Keras 3's regularization layers besides Dropout (core_layers.hpp), with Keras' names, arguments
// and formulas (keras/src/layers/regularization/): SpatialDropout1D, SpatialDropout2D,
// SpatialDropout3D, GaussianNoise, GaussianDropout and AlphaDropout, and Keras' Identity layer.
// What they share with Dropout is RandomRegularizationLayer's.
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// What Keras' regularization layers share (keras/src/layers/regularization/: Dropout,
/// SpatialDropout1D/2D/3D, GaussianNoise, GaussianDropout, AlphaDropout), owned here: one number
/// (the rate, GaussianNoise's stddev) that makes the layer the identity at 0, Keras'
/// `call(inputs, training=False)` with `if training and self.rate > 0` (the identity, cast to the
/// compute dtype as Keras' Layer.__call__ casts inputs, in inference), masks passed on, and the
/// call's draws. Their randomness is Dropout's: keyed by the model's seed, the layer's stream (its
/// build seed), the step, the example's index in the global batch and the unit (DropoutKey), so a
/// batch split over replicas or threads draws what one device draws, and a run with the same seed
/// draws the same again. Keras' seed= argument is refused (the registry's keras_fixed): the
/// model's seed keys the draws.
class RandomRegularizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const final;
  /// Keras' call(inputs, training=False): the value it writes in a file follows the model's mode.
  std::optional<bool> keras_training_default() const override { return false; }

 protected:
  /// `key`: the config's name of `amount` ("rate", GaussianNoise's "stddev").
  RandomRegularizationLayer(const char* key, float amount, std::string name)
      : Layer(std::move(name)), key_(key), amount_(amount) {}
  void build_impl(const Shape& input_shape, std::uint64_t seed) final;
  /// The training call's output for x (in the compute dtype; amount() > 0) with the call's key.
  virtual Tensor transform(const Tensor& x, const DropoutKey& key) const = 0;
  float amount() const { return amount_; }

 private:
  const char* key_;
  float amount_;
  std::uint64_t stream_ = 0;
};

/// Keras' SpatialDropout1D (rank 1: inputs (batch, steps, channels)), SpatialDropout2D (rank 2:
/// (batch, rows, cols, channels), or (batch, channels, rows, cols) with data_format
/// "channels_first") and SpatialDropout3D (rank 3: (batch, dim1, dim2, dim3, channels), or
/// (batch, channels, dim1, dim2, dim3)): Dropout with one mask value per (example, channel), whole feature maps
/// dropped, the kept ones scaled by 1 / (1 - rate). The mask is the dropout kernel's for the unit
/// (example, channel), so on every backend and in a captured step it is Dropout's.
class SpatialDropoutLayer final : public RandomRegularizationLayer {
 public:
  /// rank 1, 2 or 3; rate in [0, 1); data_format "channels_last" or "channels_first" (rank 2 and 3).
  SpatialDropoutLayer(int rank, float rate, std::string data_format = "channels_last", std::string name = "");
  std::string class_name() const override { return "SpatialDropout" + std::to_string(rank_) + "D"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(int rank, const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  float rate() const { return amount(); }
  const std::string& data_format() const { return data_format_; }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
  int rank_;
  std::string data_format_;
};

/// Keras' GaussianNoise: x + N(0, stddev^2) noise, one draw per unit, in training; stddev in
/// [0, 1] (Keras' rule). The noise is standard_normal_like's (ops_random.hpp): drawn on the
/// input's device from the dropout keying, the step read from the call's step block, so a
/// captured train step (jit_compile) replays with each step's noise, and every backend draws the
/// same noise.
class GaussianNoiseLayer final : public RandomRegularizationLayer {
 public:
  explicit GaussianNoiseLayer(float stddev, std::string name = "");
  std::string class_name() const override { return "GaussianNoise"; }
  static LayerPtr from_config(const nlohmann::json& config);
  float stddev() const { return amount(); }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
};

/// Keras' GaussianDropout: x * N(1, rate / (1 - rate)) noise in training, rate in [0, 1) (Keras
/// takes 1, whose noise has an infinite deviation). Its noise is drawn as GaussianNoise's.
class GaussianDropoutLayer final : public RandomRegularizationLayer {
 public:
  explicit GaussianDropoutLayer(float rate, std::string name = "");
  std::string class_name() const override { return "GaussianDropout"; }
  static LayerPtr from_config(const nlohmann::json& config);
  float rate() const { return amount(); }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
};

/// Keras' AlphaDropout (for SELU networks): in training a unit is kept with probability 1 - rate
/// (the dropout kernel's mask), a dropped one set to -alpha * scale of SELU, then a * x + b with
/// Keras' a and b, which keep the mean and variance. rate in [0, 1); noise_shape: Keras' (one
/// entry per input axis, null: the input's size, 1: one draw shared along that axis); its batch
/// entry must be null (each example draws its own: what keys the draws).
class AlphaDropoutLayer final : public RandomRegularizationLayer {
 public:
  /// noise_shape empty: the input's shape; else -1 stands for Keras' None.
  explicit AlphaDropoutLayer(float rate, std::vector<std::int64_t> noise_shape = {}, std::string name = "");
  std::string class_name() const override { return "AlphaDropout"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  float rate() const { return amount(); }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
  std::vector<std::int64_t> noise_shape_;
};

/// Keras' Identity: its input, unchanged (its mask too).
class IdentityLayer final : public Layer {
 public:
  explicit IdentityLayer(std::string name = "") : Layer(std::move(name)) {}
  std::string class_name() const override { return "Identity"; }
  bool supports_masking() const override { return true; }
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext&) const override { return x; }
};

LayerPtr SpatialDropout1D(float rate);
LayerPtr SpatialDropout2D(float rate, const std::string& data_format = "channels_last");
LayerPtr SpatialDropout3D(float rate, const std::string& data_format = "channels_last");
LayerPtr GaussianNoise(float stddev);
LayerPtr GaussianDropout(float rate);
LayerPtr AlphaDropout(float rate, std::vector<std::int64_t> noise_shape = {});
LayerPtr Identity();

}  // namespace lockstep::layers
