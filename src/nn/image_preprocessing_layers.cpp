#include "lockstep/layers/image_preprocessing_layers.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/tensor/device_constant.hpp"

namespace lockstep::layers {

using nlohmann::json;

// ---- Resizing, CenterCrop ----
namespace {
void check_images(const std::string& name, const char* cls, const Shape& s) {
  LOCKSTEP_CHECK(s.rank() == 4, "layer '", name, "' (", cls,
                 ") needs batched images (batch, height, width, channels), ", "channels_last, got ", s.str());
}

// One axis of TensorFlow's resize (half-pixel centres, no antialiasing; resize_bilinear_op.cc's
// and resize_nearest_neighbor_op.cc's scalers, in float as TensorFlow computes them): x viewed as
// (rows, in, inner) becomes (rows, out, inner). Bilinear: a + (b - a) * t between the inputs
// floor(s) and ceil(s) (clamped), s = (i + 0.5) * in / out - 0.5, t = s - floor(s); nearest:
// input min(floor((i + 0.5) * in / out), in - 1). Gathers of kept index constants (gather_rows,
// whose gradient scatter-adds) and a kept weight constant.
Tensor resize_axis(const Tensor& x, std::int64_t rows, std::int64_t in, std::int64_t out, std::int64_t inner,
                   bool nearest) {
  const Shape blocks{rows, out, inner};
  if (in == out) return reshape(x, blocks);  // s = i: each output its input (t = 0)
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<std::int64_t> lo(static_cast<std::size_t>(out)), hi(lo.size());
  std::vector<float> t(lo.size(), 0.0f);
  for (std::int64_t i = 0; i < out; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (nearest) {
      lo[k] = std::clamp<std::int64_t>(
          static_cast<std::int64_t>(std::floor((static_cast<float>(i) + 0.5f) * scale)), 0, in - 1);
      continue;
    }
    const float src = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float f = std::floor(src);
    lo[k] = std::clamp<std::int64_t>(static_cast<std::int64_t>(f), 0, in - 1);
    hi[k] = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(src)), 0, in - 1);
    t[k] = src - f;
  }
  const Tensor flat = reshape(x, Shape{rows * in, inner});
  const auto gather = [&](int side) {
    const std::vector<std::int64_t>& src = side == 0 ? lo : hi;
    const Tensor index =
        device_constant({"Resizing rows: in, out, side, nearest", {in, out, side, nearest ? 1 : 0}}, rows,
                        [&](std::int64_t n) {
                          std::vector<std::int64_t> v(static_cast<std::size_t>(n * out));
                          std::size_t r = 0;
                          for (std::int64_t b = 0; b < n; ++b)
                            for (std::int64_t i = 0; i < out; ++i)
                              v[r++] = b * in + src[static_cast<std::size_t>(i)];
                          return Tensor::from_vector(v, Shape{n, out});
                        })
            .reshape(Shape{rows * out});
    return reshape(gather_rows(flat, index), blocks);
  };
  if (nearest) return gather(0);
  const DType dt = x.dtype();
  const Tensor weight = device_constant(
      {"Resizing weights: in, out, dtype", {in, out, static_cast<std::int64_t>(dt)}}, out,
      [&](std::int64_t n) {
        return Tensor::from_vector(std::vector<float>(t.begin(), t.begin() + n), Shape{n, 1}).to(dt);
      });
  const Tensor a = gather(0);
  return add(a, mul(sub(gather(1), a), weight));
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
  LOCKSTEP_CHECK(interpolation_ == "bilinear" || interpolation_ == "nearest", "Resizing: interpolation '",
                 interpolation_, "' is not supported by lockstep (it has \"bilinear\" and \"nearest\")");
}

Shape ResizingLayer::compute_output_shape(const Shape& s) const {
  check_images(name(), "Resizing", s);
  return Shape{s[0], height_, width_, s[3]};
}

Tensor ResizingLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  const Shape out_shape = compute_output_shape(x_in.shape());
  Tensor x = autocast(x_in);
  std::int64_t h = x.dim(1), w = x.dim(2);
  const std::int64_t n = x.dim(0), c = x.dim(3);
  if (x.numel() == 0) return reshape(x, Shape{n, height_, width_, c});
  if (crop_to_aspect_ratio_) {
    // Keras' rule (backend/tensorflow/image.py resize): in float32, then truncated.
    const auto ch = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(static_cast<float>(w * height_) / static_cast<float>(width_)), 1, h);
    const auto cw = std::clamp<std::int64_t>(
        static_cast<std::int64_t>(static_cast<float>(h * width_) / static_cast<float>(height_)), 1, w);
    x = crop_images(x, static_cast<std::int64_t>(static_cast<float>(h - ch) / 2.0f),
                    static_cast<std::int64_t>(static_cast<float>(w - cw) / 2.0f), ch, cw, name(), ctx);
    h = ch;
    w = cw;
  }
  const bool nearest = interpolation_ == "nearest";
  const Tensor across = resize_axis(x, n * h, w, width_, c, nearest);           // (n * h, width, c)
  const Tensor down = resize_axis(across, n, h, height_, width_ * c, nearest);  // (n, height, width * c)
  return reshape(down, out_shape.dims()[0] < 0 ? Shape{n, height_, width_, c} : out_shape);
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
