#pragma once
// Keras 3's preprocessing layers that sit inside a model: Normalization (adapted statistics) and
// the data-augmentation layers RandomFlip, RandomContrast and RandomBrightness, with Keras' names,
// defaults, weights and configs (keras/src/layers/preprocessing/normalization.py,
// image_preprocessing/random_flip.py, random_contrast.py, random_brightness.py).
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// Keras' Normalization arguments. axis: the axes that keep one mean and variance per index
/// (Keras' default -1, the features); std::nullopt is Keras' axis=None (one mean and variance for
/// every element). The batch axis 0 cannot be kept. mean / variance: both or neither; given, they
/// are constants (no weights, as Keras), a scalar (one value) or the kept axes' values flattened
/// in row-major order (Keras broadcasts a lower-rank mean to the last kept axes; lockstep takes a
/// scalar or all of them). invert: x * max(sqrt(variance), epsilon) + mean instead.
struct NormalizationOptions {
  std::optional<std::vector<std::int64_t>> axis = std::vector<std::int64_t>{-1};
  std::optional<std::vector<float>> mean;
  std::optional<std::vector<float>> variance;
  bool invert = false;
  std::string name;
};

/// Keras 3's Normalization: (x - mean) / max(sqrt(variance), 1e-7) (Keras' backend.epsilon()),
/// with mean and variance either given or adapted to data (adapt). Adapted, they are the layer's
/// non-trainable weights mean, variance (the kept axes' shape) and count (a scalar Keras keeps for
/// old files and never updates; int64 in Keras' files), in Keras' order, so a Keras-adapted file
/// loads here and back. Under a strategy every replica holds the same statistics (mirrored
/// non-trainable weights that fit never changes).
class NormalizationLayer final : public Layer {
 public:
  explicit NormalizationLayer(NormalizationOptions options);
  std::string class_name() const override { return "Normalization"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override { return s; }
  bool supports_masking() const override { return true; }
  Tensor call(const Tensor& x, const CallContext& ctx) const override;

  /// Keras' adapt(data): the mean and (population) variance of the batches over every axis but
  /// the kept ones, combined batch by batch as Keras combines a dataset's (the lack-of-fit sum of
  /// squares), assigned to the weights. Builds the layer for the first batch's shape (its batch
  /// axis unknown) when it is not built; every batch must agree with the built shape on the kept
  /// axes. ValueError where the layer has mean and variance given, or for no batches.
  void adapt(const std::vector<Tensor>& batches);
  void adapt(const Tensor& data) { adapt(std::vector<Tensor>{data}); }

  /// The kept axes' statistics now (adapted or given), as float32 host tensors of the kept shape.
  Tensor mean() const;
  Tensor variance() const;

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  // The kept axes of a rank-`rank` input (sorted, non-negative) and the shape statistics broadcast
  // to ([1 or the kept dimension] per axis, batch 1).
  std::vector<std::int64_t> kept_axes(std::int64_t rank) const;
  NormalizationOptions options_;
  Shape broadcast_shape_;
  std::int64_t constant_id_ = 0;  // names the given mean / variance among device constants
  Variable mean_, variance_, count_;
};

/// Keras' RandomFlip arguments: mode "horizontal_and_vertical" (Keras' default), "horizontal" (a
/// left-right flip) or "vertical" (top-bottom); seed, Keras' seed argument: the layer's own stream
/// of coins (else one from the model's seed, as Dropout's).
struct RandomFlipOptions {
  std::string mode = "horizontal_and_vertical";
  std::optional<std::int64_t> seed;
  std::string name;
};

/// Keras 3's RandomFlip on NHWC images: in training each example is flipped, or not, with
/// probability 1/2, one coin per example (Keras' rule: "horizontal_and_vertical" flips both ways
/// on the same coin); in inference the identity (Keras' call defaults training=True, and a model's
/// predict and evaluate pass False). The coins are Dropout's counter-based generator (DropoutKey):
/// an example's coin depends on (model seed, layer stream, step, its global index) only, so the
/// same whatever the replicas or batch split, and another each step.
class RandomFlipLayer final : public Layer {
 public:
  explicit RandomFlipLayer(RandomFlipOptions options);
  std::string class_name() const override { return "RandomFlip"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  /// Keras' RandomFlip.call(data, training=True) (BaseImagePreprocessingLayer): the value it writes
  /// in a file follows the model's mode.
  std::optional<bool> keras_training_default() const override { return true; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  RandomFlipOptions options_;
  bool horizontal_ = true, vertical_ = true;
  std::uint64_t stream_ = 0;
};

/// Keras' RandomContrast and RandomBrightness arguments. factor: Keras' number f or (lower, upper)
/// (one or two entries), kept as Keras' _set_factor keeps it: a pair is sorted, a number f is
/// (max(-f, bound), f) with bound 0 for RandomContrast (so Keras 3 draws its contrast factors in
/// [1, 1 + f]) and -1 for RandomBrightness; a number must lie in the bounds ([0, 1], [-1, 1]), and
/// a pair must not lie wholly outside them. value_range: the images' range, Keras' (0, 255)
/// (RandomBrightness sorts it, as Keras; RandomContrast refuses a reversed one, which Keras takes
/// and clips every pixel to its first value), what the outputs are clipped to.
/// seed: Keras' seed argument, the layer's own stream (else one from the model's seed, as
/// RandomFlip's).
struct RandomColorOptions {
  std::vector<float> factor;
  std::vector<float> value_range = {0.0f, 255.0f};
  std::optional<std::int64_t> seed;
  std::string name;
};

/// What Keras 3's colour augmentations share on NHWC images: their arguments (factor kept as
/// Keras' (lower, upper), value_range, seed) and config, the image check, Keras' training=True
/// default, and one uniform draw per image in training (the identity, cast to the compute dtype,
/// in inference). The draw is ops_random.hpp's uniform for the unit (example, 0): keyed by
/// the model's seed (or the layer's own), the layer's stream, the step and the example's global
/// index, so replicas draw what one device draws and a captured step replays each step's draws.
class RandomColorLayer : public Layer {
 public:
  nlohmann::json get_config() const override;
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const final;
  /// Keras' BaseImagePreprocessingLayer.call(data, training=True).
  std::optional<bool> keras_training_default() const override { return true; }
  /// Keras' self.factor: (lower, upper).
  float lower() const { return lower_; }
  float upper() const { return upper_; }

 protected:
  /// `factor`: (lower, upper) as the class reads Keras' factor; `tag`: the class's stream when the
  /// layer has a seed of its own.
  RandomColorLayer(RandomColorOptions options, std::pair<float, float> factor, std::uint64_t tag);
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;
  /// Where each image's draw lies: [first, second).
  virtual std::pair<float, float> draw_range() const = 0;
  /// The training call's output for images x (in the compute dtype, not empty), given the call's
  /// draw per image, shaped (batch, 1, 1, 1).
  virtual Tensor transform(const Tensor& x, const Tensor& draw) const = 0;
  const RandomColorOptions& options() const { return options_; }

 private:
  RandomColorOptions options_;
  float lower_ = 0, upper_ = 0;
  std::uint64_t tag_ = 0, stream_ = 0;
};

/// Keras 3's RandomContrast: each image one factor uniform in [1 - lower, 1 + upper], each
/// channel (x - mean) * factor + mean (mean over the image's height and width), clipped to
/// value_range.
class RandomContrastLayer final : public RandomColorLayer {
 public:
  explicit RandomContrastLayer(RandomColorOptions options);
  std::string class_name() const override { return "RandomContrast"; }
  static LayerPtr from_config(const nlohmann::json& config);

 private:
  std::pair<float, float> draw_range() const override;
  Tensor transform(const Tensor& x, const Tensor& draw) const override;
};

/// Keras 3's RandomBrightness: each image one delta uniform in [lower, upper] times
/// (value_range's high - low), added to every pixel, then clipped to value_range.
class RandomBrightnessLayer final : public RandomColorLayer {
 public:
  explicit RandomBrightnessLayer(RandomColorOptions options);
  std::string class_name() const override { return "RandomBrightness"; }
  static LayerPtr from_config(const nlohmann::json& config);

 private:
  std::pair<float, float> draw_range() const override;
  Tensor transform(const Tensor& x, const Tensor& draw) const override;
};

LayerPtr Normalization(NormalizationOptions options = {});
LayerPtr RandomFlip(const std::string& mode = "horizontal_and_vertical", std::optional<std::int64_t> seed = {});
/// factor: {f} or {lower, upper}; value_range {low, high}.
LayerPtr RandomContrast(std::vector<float> factor, std::vector<float> value_range = {0.0f, 255.0f},
                        std::optional<std::int64_t> seed = {});
LayerPtr RandomBrightness(std::vector<float> factor, std::vector<float> value_range = {0.0f, 255.0f},
                          std::optional<std::int64_t> seed = {});

}  // namespace lockstep::layers
