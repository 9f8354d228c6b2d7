#pragma once
// Keras 3's geometric augmentation layers RandomTranslation, RandomRotation and RandomZoom, with
// Keras' names, arguments, defaults and configs (keras/src/layers/preprocessing/
// image_preprocessing/random_translation.py, random_rotation.py, random_zoom.py): each builds one
// transform per image from its uniform draws and applies affine_transform (affine_transform.hpp).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/layers/affine_transform.hpp"
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// The arguments the three share, Keras' defaults: fill_mode "reflect" ("wrap", "constant",
/// "nearest"), interpolation "bilinear" ("nearest"), fill_value 0 (read where fill_mode is
/// "constant"), seed: Keras' seed argument, the layer's own stream of draws (else one from the
/// model's seed, as RandomFlip's). data_format is channels_last (the registry refuses another).
struct RandomAffineOptions {
  std::string fill_mode = "reflect";
  std::string interpolation = "bilinear";
  float fill_value = 0.0f;
  std::optional<std::int64_t> seed;
  std::string name;
};

/// What Keras 3's geometric augmentations share on NHWC images: the options above and their
/// config, the image check, Keras' training=True default, and in training one transform per
/// image from uniform draws, applied by affine_transform (in inference the identity, cast to the
/// compute dtype: Keras' transform_images). Draw j of an image is uniform's unit (example, 0)
/// under the key of the layer's stream j (random_draws.hpp): keyed by the model's seed (or the
/// layer's own), the step and the example's global index, so replicas draw what one device draws
/// and a captured step replays each step's draws.
class RandomAffineLayer : public Layer {
 public:
  nlohmann::json get_config() const override;
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const final;
  /// Keras' BaseImagePreprocessingLayer.call(data, training=True).
  std::optional<bool> keras_training_default() const override { return true; }

  /// Keras' transforms (batch, 8), float32, for images of (height, width) from each image's draws
  /// (the class's draw_count() of them, each (batch, 1), uniform in [0, 1)).
  virtual Tensor transforms(const std::vector<Tensor>& draws, std::int64_t height,
                            std::int64_t width) const = 0;
  /// How many uniform draws each image takes.
  virtual int draw_count() const = 0;

 protected:
  /// `tag`: the class's stream when the layer has a seed of its own; `cls`: its class name, for
  /// messages (fill_mode and interpolation are checked here).
  RandomAffineLayer(RandomAffineOptions options, std::uint64_t tag, const char* cls);
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;
  const RandomAffineOptions& options() const { return options_; }
  /// The options a class's from_config reads from Keras' config (all but its factors).
  static RandomAffineOptions options_from_config(const nlohmann::json& config);

 private:
  RandomAffineOptions options_;
  Interpolation interpolation_ = Interpolation::kBilinear;
  FillMode fill_mode_ = FillMode::kReflect;
  std::uint64_t tag_ = 0, stream_ = 0;
};

/// A factor as Keras takes it: a number f or a pair (lower, upper) (one or two entries).
using KerasFactor = std::vector<float>;

/// Keras 3's RandomTranslation: each image shifted by dx = uniform(width_lower, width_upper) *
/// width and dy = uniform(height_lower, height_upper) * height pixels (transform [1, 0, -dx, 0, 1,
/// -dy, 0, 0]). A factor f is (-|f|, |f|), a pair sorted; every number must lie in [-1, 1].
class RandomTranslationLayer final : public RandomAffineLayer {
 public:
  RandomTranslationLayer(KerasFactor height_factor, KerasFactor width_factor, RandomAffineOptions options);
  std::string class_name() const override { return "RandomTranslation"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Tensor transforms(const std::vector<Tensor>& draws, std::int64_t height, std::int64_t width) const override;
  int draw_count() const override { return 2; }

 private:
  KerasFactor height_factor_, width_factor_;
  std::pair<float, float> height_, width_;
};

/// Keras 3's RandomRotation: each image rotated by uniform(lower * 360, upper * 360) degrees
/// about its centre ((width - 1) / 2, (height - 1) / 2), Keras' _compute_affine_matrix with no
/// translation, scale 1 and no shear. factor as Keras' base _set_factor with bounds (-1, 1): a
/// number f in [-1, 1] is (-|f|, |f|); a pair is sorted and refused only where it lies wholly
/// outside [-1, 1]. Kept in the config as (lower, upper), as Keras keeps it.
class RandomRotationLayer final : public RandomAffineLayer {
 public:
  RandomRotationLayer(KerasFactor factor, RandomAffineOptions options);
  std::string class_name() const override { return "RandomRotation"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Tensor transforms(const std::vector<Tensor>& draws, std::int64_t height, std::int64_t width) const override;
  int draw_count() const override { return 1; }

 private:
  std::pair<float, float> factor_;
};

/// Keras 3's RandomZoom: each image scaled about its centre by zy = uniform(1 + height_lower,
/// 1 + height_upper) and zx = uniform(1 + width_lower, 1 + width_upper), or zx = zy where
/// width_factor is not given (transform [zx, 0, (width - 1) / 2 (1 - zx), 0, zy, (height - 1) / 2
/// (1 - zy), 0, 0]: a factor above 1 shows more of the image, zooming out). A factor f is
/// (-|f|, |f|), a pair sorted; every number must lie in (-1, 1].
class RandomZoomLayer final : public RandomAffineLayer {
 public:
  RandomZoomLayer(KerasFactor height_factor, std::optional<KerasFactor> width_factor,
                  RandomAffineOptions options);
  std::string class_name() const override { return "RandomZoom"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Tensor transforms(const std::vector<Tensor>& draws, std::int64_t height, std::int64_t width) const override;
  int draw_count() const override { return width_factor_ ? 2 : 1; }

 private:
  KerasFactor height_factor_;
  std::optional<KerasFactor> width_factor_;
  std::pair<float, float> height_, width_;
};

LayerPtr RandomTranslation(KerasFactor height_factor, KerasFactor width_factor,
                           RandomAffineOptions options = {});
LayerPtr RandomRotation(KerasFactor factor, RandomAffineOptions options = {});
LayerPtr RandomZoom(KerasFactor height_factor, std::optional<KerasFactor> width_factor = std::nullopt,
                    RandomAffineOptions options = {});

}  // namespace lockstep::layers
