#pragma once
// Keras 3's regularization layers besides Dropout (core_layers.hpp), with Keras' names, arguments
// and formulas (keras/src/layers/regularization/): SpatialDropout1D, SpatialDropout2D,
// SpatialDropout3D, GaussianNoise, GaussianDropout and AlphaDropout, and Keras' Identity layer.
// What they share with Dropout is RandomRegularizationLayer's.
#include <cstdint>
#include <optional>

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
/// draws the same again. Keras' seed argument (kept in the config, null when not given) picks the
/// layer's own stream of draws; without one the model's per-layer seed does (random_draws.hpp's
/// layer_stream).
class RandomRegularizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }
  nlohmann::json get_config() const override;
  const std::optional<std::int64_t>& seed() const { return seed_; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const CallContext& ctx) const final;
  /// Keras' call(inputs, training=False): the value it writes in a file follows the model's mode.
  std::optional<bool> keras_training_default() const override { return false; }

 protected:
  /// `key`: the config's name of `amount` ("rate", GaussianNoise's "stddev"); `tag`: the class's
  /// stream when the layer has a seed of its own.
  RandomRegularizationLayer(const char* key, float amount, std::uint64_t tag, std::optional<std::int64_t> seed,
                            std::string name)
      : Layer(std::move(name)), key_(key), amount_(amount), tag_(tag), seed_(seed) {}
  void build_impl(const Shape& input_shape, std::uint64_t seed) final;
  /// The training call's output for x (in the compute dtype; amount() > 0) with the call's key.
  virtual Tensor transform(const Tensor& x, const DropoutKey& key) const = 0;
  float amount() const { return amount_; }

 private:
  const char* key_;
  float amount_;
  std::uint64_t tag_;
  std::optional<std::int64_t> seed_;
  std::uint64_t stream_ = 0;
};

/// Keras' noise_shape of Dropout and AlphaDropout: one entry per input axis, -1 (Keras' None) the
/// input's size, 1 one draw shared along that axis; empty: the input's shape. Its batch entry
/// must be None (each example draws its own mask, keyed by its index in the global batch, so
/// that replicas draw what one device draws).
class NoiseShape {
 public:
  /// ValueError naming `cls` for an entry neither positive nor -1, or a batch entry not -1.
  NoiseShape(std::vector<std::int64_t> dims, const char* cls);
  const std::vector<std::int64_t>& dims() const { return dims_; }
  bool empty() const { return dims_.empty(); }
  /// ValueError naming the layer where the noise does not broadcast against inputs of shape `s`.
  void check(const Layer& layer, const Shape& s) const;
  /// The mask's shape for inputs of shape `s` (Keras' concrete noise shape).
  Shape concrete(const Shape& s) const;
  /// Keras' config value: null when empty, else the list with None for -1.
  nlohmann::json to_json() const;
  /// The dims of a config's "noise_shape" (absent or null: empty).
  static std::vector<std::int64_t> from_config(const nlohmann::json& config);

 private:
  std::vector<std::int64_t> dims_;
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
  SpatialDropoutLayer(int rank, float rate, std::string data_format = "channels_last",
                      std::optional<std::int64_t> seed = std::nullopt, std::string name = "");
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
  explicit GaussianNoiseLayer(float stddev, std::optional<std::int64_t> seed = std::nullopt, std::string name = "");
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
  explicit GaussianDropoutLayer(float rate, std::optional<std::int64_t> seed = std::nullopt, std::string name = "");
  std::string class_name() const override { return "GaussianDropout"; }
  static LayerPtr from_config(const nlohmann::json& config);
  float rate() const { return amount(); }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
};

/// Keras' AlphaDropout (for SELU networks): in training a unit is kept with probability 1 - rate
/// (the dropout kernel's mask), a dropped one set to -alpha * scale of SELU, then a * x + b with
/// Keras' a and b, which keep the mean and variance. rate in [0, 1); noise_shape: NoiseShape's.
class AlphaDropoutLayer final : public RandomRegularizationLayer {
 public:
  /// noise_shape empty: the input's shape; else -1 stands for Keras' None.
  explicit AlphaDropoutLayer(float rate, std::vector<std::int64_t> noise_shape = {},
                             std::optional<std::int64_t> seed = std::nullopt, std::string name = "");
  std::string class_name() const override { return "AlphaDropout"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  float rate() const { return amount(); }

 private:
  Tensor transform(const Tensor& x, const DropoutKey& key) const override;
  NoiseShape noise_shape_;
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

// Keras' argument orders; seed: the layer's own stream of draws (else the model's seed's).
LayerPtr SpatialDropout1D(float rate, std::optional<std::int64_t> seed = std::nullopt);
LayerPtr SpatialDropout2D(float rate, const std::string& data_format = "channels_last",
                          std::optional<std::int64_t> seed = std::nullopt);
LayerPtr SpatialDropout3D(float rate, const std::string& data_format = "channels_last",
                          std::optional<std::int64_t> seed = std::nullopt);
LayerPtr GaussianNoise(float stddev, std::optional<std::int64_t> seed = std::nullopt);
LayerPtr GaussianDropout(float rate, std::optional<std::int64_t> seed = std::nullopt);
LayerPtr AlphaDropout(float rate, std::vector<std::int64_t> noise_shape = {},
                      std::optional<std::int64_t> seed = std::nullopt);
LayerPtr Identity();

}  // namespace lockstep::layers
