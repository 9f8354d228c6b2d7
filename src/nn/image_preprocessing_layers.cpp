#include "lockstep/layers/image_preprocessing_layers.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/image_resize.hpp"

namespace lockstep::layers {

using nlohmann::json;

// ---- Resizing, CenterCrop ----
namespace {
void check_images(const std::string& name, const char* cls, const Shape& s) {
  LOCKSTEP_CHECK(s.rank() == 4, "layer '", name, "' (", cls,
                 ") needs batched images (batch, height, width, channels), ", "channels_last, got ", s.str());
}

// The centre (h, w) of x's images, starting at (top, left): Cropping2D's gather.
Tensor crop_images(const Tensor& x, std::int64_t top, std::int64_t left, std::int64_t h, std::int64_t w,
                   const std::string& name, const CallContext& ctx) {
  if (h == x.dim(1) && w == x.dim(2)) return x;
  const Cropping2DLayer crop({Pair{top, x.dim(1) - h - top}, Pair{left, x.dim(2) - w - left}},
                             name + "/crop");
  return crop.call(x, ctx);
}
}  // namespace

ResizingLayer::ResizingLayer(std::int64_t height, std::int64_t width, std::string interpolation,
                             bool crop_to_aspect_ratio, std::string name)
    : Layer(std::move(name)),
      height_(height),
      width_(width),
      interpolation_(std::move(interpolation)),
      crop_to_aspect_ratio_(crop_to_aspect_ratio) {
  LOCKSTEP_CHECK(height > 0 && width > 0, "Resizing: height and width must be positive, got ", height,
                 " and ", width);
  (void)parse_interpolation(interpolation_, "Resizing");
}

Shape ResizingLayer::compute_output_shape(const Shape& s) const {
  check_images(name(), "Resizing", s);
  return Shape{s[0], height_, width_, s[3]};
}

Tensor ResizingLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  (void)compute_output_shape(x_in.shape());
  Tensor x = autocast(x_in);
  const std::int64_t h = x.dim(1), w = x.dim(2);
  if (crop_to_aspect_ratio_ && x.numel() > 0) {
    // Keras' rule (backend/tensorflow/image.py resize): in float32, then truncated.
    const auto ch = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(static_cast<float>(w * height_) / static_cast<float>(width_)), 1, h);
    const auto cw = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(static_cast<float>(h * width_) / static_cast<float>(height_)), 1, w);
    x = crop_images(x, static_cast<std::int64_t>(static_cast<float>(h - ch) / 2.0f),
                    static_cast<std::int64_t>(static_cast<float>(w - cw) / 2.0f), ch, cw, name(), ctx);
  }
  return resize_images(x, height_, width_, parse_interpolation(interpolation_, "Resizing"));
}

json ResizingLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"height", height_},
            {"width", width_},
            {"interpolation", interpolation_},
            {"crop_to_aspect_ratio", crop_to_aspect_ratio_}});
  return c;
}

LayerPtr ResizingLayer::from_config(const json& c) {
  return std::make_shared<ResizingLayer>(
      c.at("height").get<std::int64_t>(), c.at("width").get<std::int64_t>(),
      c.value("interpolation", std::string("bilinear")), c.value("crop_to_aspect_ratio", false),
      c.at("name").get<std::string>());
}

CenterCropLayer::CenterCropLayer(std::int64_t height, std::int64_t width, std::string name)
    : Layer(std::move(name)), height_(height), width_(width) {
  LOCKSTEP_CHECK(height > 0 && width > 0, "CenterCrop: height and width must be positive, got ", height,
                 " and ", width);
}

Shape CenterCropLayer::compute_output_shape(const Shape& s) const {
  check_images(name(), "CenterCrop", s);
  LOCKSTEP_CHECK((s[1] < 0 || s[1] >= height_) && (s[2] < 0 || s[2] >= width_), "layer '", name(),
                 "' (CenterCrop): images ", s.str(), " are smaller than the crop (", height_, ", ", width_,
                 "), which Keras resizes instead (smart_resize) and lockstep does not support");
  return Shape{s[0], height_, width_, s[3]};
}

Tensor CenterCropLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  (void)compute_output_shape(x_in.shape());
  const Tensor x = autocast(x_in);
  return crop_images(x, (x.dim(1) - height_) / 2, (x.dim(2) - width_) / 2, height_, width_, name(), ctx);
}

json CenterCropLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"height", height_}, {"width", width_}});
  return c;
}

LayerPtr CenterCropLayer::from_config(const json& c) {
  return std::make_shared<CenterCropLayer>(
      c.at("height").get<std::int64_t>(), c.at("width").get<std::int64_t>(), c.at("name").get<std::string>());
}

LayerPtr Resizing(std::int64_t height, std::int64_t width, const std::string& interpolation,
                  bool crop_to_aspect_ratio) {
  return std::make_shared<ResizingLayer>(height, width, interpolation, crop_to_aspect_ratio);
}
LayerPtr CenterCrop(std::int64_t height, std::int64_t width) {
  return std::make_shared<CenterCropLayer>(height, width);
}

}  // namespace lockstep::layers
