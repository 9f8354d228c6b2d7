#pragma once
// Keras 3's image preprocessing layers that change an image's size inside a model, Resizing,
// CenterCrop and RandomCrop (keras/src/layers/preprocessing/image_preprocessing/resizing.py,
// center_crop.py, random_crop.py), with Keras' names, defaults and configs.
#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// Keras 3's Resizing arguments (layers/preprocessing/image_preprocessing/resizing.py), with its
/// defaults: the target height and width, interpolation "bilinear", "nearest", "bicubic",
/// "lanczos3", "lanczos5" or "area" (resize_images, layers/image_resize.hpp, says each one's
/// rule), antialias (tf.image.resize's: a shrinking kernel widened; bilinear, bicubic and the
/// lanczos ones), crop_to_aspect_ratio (crop the centre to the target's aspect ratio first) or
/// pad_to_aspect_ratio (pad both sides with fill_value to it first), not both. Keras' fill_mode
/// takes only "constant" and data_format only "channels_last" here (the registry refuses others).
struct ResizingOptions {
  std::int64_t height = 0, width = 0;
  std::string interpolation = "bilinear";
  bool crop_to_aspect_ratio = false;
  bool pad_to_aspect_ratio = false;
  float fill_value = 0.0f;
  bool antialias = false;
  std::string name;
};

/// Keras 3's Resizing on NHWC images, in training and inference alike, as its TensorFlow backend
/// runs it (backend/tensorflow/image.py resize): the centre crop or the padding to the target's
/// aspect ratio, then tf.image.resize. Gathers and weights from kept constants, so CPU, GPU,
/// gradients and captured steps.
class ResizingLayer final : public Layer {
 public:
  explicit ResizingLayer(ResizingOptions options);
  ResizingLayer(std::int64_t height, std::int64_t width, std::string interpolation = "bilinear",
                bool crop_to_aspect_ratio = false, std::string name = "");
  std::string class_name() const override { return "Resizing"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  /// Keras' Resizing.call(data, training=True) (BaseImagePreprocessingLayer): the value it writes
  /// in a file follows the model's mode.
  std::optional<bool> keras_training_default() const override { return true; }
  const ResizingOptions& options() const { return options_; }

 private:
  // Keras' pad_to_aspect_ratio: x padded with fill_value at top and bottom, or left and right,
  // by the same number of pixels, towards the target's aspect ratio.
  Tensor pad_to_aspect_ratio(const Tensor& x) const;
  ResizingOptions options_;
};

/// Keras 3's CenterCrop(height, width): the centre (height, width) of NHWC images, starting at
/// (in - out) // 2, in training and inference alike. An input smaller than the crop, which Keras
/// resizes instead (smart_resize), is refused by name.
class CenterCropLayer final : public Layer {
 public:
  CenterCropLayer(std::int64_t height, std::int64_t width, std::string name = "");
  std::string class_name() const override { return "CenterCrop"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  /// Keras' CenterCrop.call(data, training=True) (BaseImagePreprocessingLayer): the value it writes
  /// in a file follows the model's mode.
  std::optional<bool> keras_training_default() const override { return true; }

 private:
  std::int64_t height_, width_;
};

/// Keras 3's RandomCrop(height, width, seed) on NHWC images, output (batch, height, width, channels)
/// always, as Keras documents it:
/// - in training, images at least (height, width): the window of (height, width) at one random
///   offset for the whole batch, h_start uniform in [0, in_height - height] and w_start likewise
///   (Keras' int(uniform(0, in - out + 1))), drawn once per step for the global batch (every
///   replica draws the same: the result does not depend on the replica count), from the layer's
///   own seed or else the model's per-layer seed (random_draws.hpp's layer_stream);
/// - in inference, or training on images smaller than the target in either dimension: the centre
///   of the largest window of the target's aspect ratio, resized bilinearly to (height, width)
///   (Keras 2's smart_resize; Resizing with crop_to_aspect_ratio).
/// Keras 3.15.1 returns inference inputs unchanged (keras-team/keras#21868), which lockstep does not
/// copy. The crop is one gather of the window's pixels at an offset computed on the device (a
/// batch of 2^24 pixels or more: affine_transform's shift, then the window), so it runs on every
/// backend and in captured steps, and its input gets a gradient.
class RandomCropLayer final : public Layer {
 public:
  RandomCropLayer(std::int64_t height, std::int64_t width, std::optional<std::int64_t> seed = std::nullopt,
                  std::string name = "");
  std::string class_name() const override { return "RandomCrop"; }
  nlohmann::json get_config() const override;
  static LayerPtr from_config(const nlohmann::json& config);
  Shape compute_output_shape(const Shape& s) const override;
  Tensor call(const Tensor& x, const CallContext& ctx) const override;
  /// Keras' BaseImagePreprocessingLayer.call(data, training=True).
  std::optional<bool> keras_training_default() const override { return true; }
  const std::optional<std::int64_t>& seed() const { return seed_; }

 protected:
  void build_impl(const Shape& input_shape, std::uint64_t seed) override;

 private:
  // The (height, width) window at the step's random offset.
  Tensor random_crop(const Tensor& x, const CallContext& ctx) const;
  std::int64_t height_, width_;
  std::optional<std::int64_t> seed_;
  std::uint64_t stream_ = 0;
};

LayerPtr Resizing(std::int64_t height, std::int64_t width, const std::string& interpolation = "bilinear",
                  bool crop_to_aspect_ratio = false);
LayerPtr Resizing(const ResizingOptions& options);
LayerPtr CenterCrop(std::int64_t height, std::int64_t width);
LayerPtr RandomCrop(std::int64_t height, std::int64_t width, std::optional<std::int64_t> seed = std::nullopt);

}  // namespace lockstep::layers
