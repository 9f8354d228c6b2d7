#pragma once
// Keras 3's image preprocessing layers that change an image's size inside a model, Resizing and
// CenterCrop (keras/src/layers/preprocessing/image_preprocessing/resizing.py, center_crop.py),
// with Keras' names, defaults and configs.
#include <string>

#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// Keras 3's Resizing(height, width, interpolation="bilinear", crop_to_aspect_ratio) on NHWC
/// images, in training and inference alike: tf.image.resize without antialiasing (what Keras'
/// TensorFlow backend runs), interpolation "bilinear", "nearest", "bicubic", "lanczos3",
/// "lanczos5" or "area" (resize_images, layers/image_resize.hpp, says each one's rule).
/// crop_to_aspect_ratio first crops the centre to the target's aspect ratio (Keras' rule).
/// Gathers and weights from kept constants, so CPU, GPU, gradients and captured steps.
/// pad_to_aspect_ratio, antialias=True and other interpolations are refused by name (from a
/// .keras file too).
class ResizingLayer final : public Layer {
 public:
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

 private:
  std::int64_t height_, width_;
  std::string interpolation_;
  bool crop_to_aspect_ratio_;
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

LayerPtr Resizing(std::int64_t height, std::int64_t width, const std::string& interpolation = "bilinear",
                  bool crop_to_aspect_ratio = false);
LayerPtr CenterCrop(std::int64_t height, std::int64_t width);

}  // namespace lockstep::layers
