#include "lockstep/layers/image_preprocessing_layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "lockstep/layers/affine_transform.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/image_resize.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/ops.hpp"
#include "nn/image_layer_args.hpp"
#include "lockstep/tensor/ops_random.hpp"
#include "nn/random_draws.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

using nlohmann::json;

// ---- Resizing, CenterCrop, RandomCrop ----
namespace {
// The centre (h, w) of x's images, starting at (top, left): Cropping2D's gather.
Tensor crop_images(const Tensor& x, std::int64_t top, std::int64_t left, std::int64_t h, std::int64_t w,
                   const std::string& name, const CallContext& ctx) {
  if (h == x.dim(1) && w == x.dim(2)) return x;
  const Cropping2DLayer crop({Pair{top, x.dim(1) - h - top}, Pair{left, x.dim(2) - w - left}},
                             name + "/crop");
  return crop.call(x, ctx);
}
}  // namespace

ResizingLayer::ResizingLayer(ResizingOptions options) : Layer(options.name), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.height > 0 && options_.width > 0, "Resizing: height and width must be positive, got ",
                 options_.height, " and ", options_.width);
  (void)parse_interpolation(options_.interpolation, "Resizing");
  LOCKSTEP_CHECK(!(options_.crop_to_aspect_ratio && options_.pad_to_aspect_ratio),
                 "Resizing: only one of pad_to_aspect_ratio and crop_to_aspect_ratio can be true");
  LOCKSTEP_CHECK(std::isfinite(options_.fill_value), "Resizing: fill_value must be a finite number, got ",
                 options_.fill_value);
}

ResizingLayer::ResizingLayer(std::int64_t height, std::int64_t width, std::string interpolation,
                             bool crop_to_aspect_ratio, std::string name)
    : ResizingLayer(ResizingOptions{.height = height,
                                    .width = width,
                                    .interpolation = std::move(interpolation),
                                    .crop_to_aspect_ratio = crop_to_aspect_ratio,
                                    .name = std::move(name)}) {}

Shape ResizingLayer::compute_output_shape(const Shape& s) const {
  check_images(*this, s);
  return Shape{s[0], options_.height, options_.width, s[3]};
}

namespace {
// Keras' arithmetic for the aspect-ratio size: a * b / c in float32, truncated.
std::int64_t scaled(std::int64_t a, std::int64_t b, std::int64_t c) {
  return static_cast<std::int64_t>(static_cast<float>(a * b) / static_cast<float>(c));
}
std::int64_t half(std::int64_t v) { return static_cast<std::int64_t>(static_cast<float>(v) / 2.0f); }

// The centre of x's images' largest window of the aspect ratio height : width (Keras' Resizing
// crop_to_aspect_ratio, smart_resize, RandomCrop's else-branch).
Tensor crop_to_aspect_ratio(const Tensor& x, std::int64_t height, std::int64_t width, const std::string& name,
                            const CallContext& ctx) {
  const std::int64_t h = x.dim(1), w = x.dim(2);
  const auto ch = std::clamp<std::int64_t>(scaled(w, height, width), 1, h);
  const auto cw = std::clamp<std::int64_t>(scaled(h, width, height), 1, w);
  return crop_images(x, half(h - ch), half(w - cw), ch, cw, name, ctx);
}
}  // namespace

Tensor ResizingLayer::pad_to_aspect_ratio(const Tensor& x) const {
  const std::int64_t h = x.dim(1), w = x.dim(2);
  const std::int64_t top = half(std::max(h, scaled(w, options_.height, options_.width)) - h);
  const std::int64_t left = half(std::max(w, scaled(h, options_.width, options_.height)) - w);
  if (top == 0 && left == 0) return x;
  const Tensor padded = zero_pad2d(x, {top, top, left, left});
  if (options_.fill_value == 0.0f) return padded;
  // fill_value on the padding, 0 inside: added, it leaves the image's values as they are.
  const std::int64_t ph = padded.dim(1), pw = padded.dim(2);
  std::int64_t fill_bits = 0;
  std::memcpy(&fill_bits, &options_.fill_value, sizeof(float));
  const Tensor border = device_constant(
      {"Resizing fill border: h, w, top, left, fill, dtype",
       {ph, pw, top, left, fill_bits, static_cast<std::int64_t>(x.dtype())}},
      1, [&](std::int64_t) {
        std::vector<float> v(static_cast<std::size_t>(ph * pw), options_.fill_value);
        for (std::int64_t i = top; i < ph - top; ++i)
          for (std::int64_t j = left; j < pw - left; ++j) v[static_cast<std::size_t>(i * pw + j)] = 0.0f;
        return Tensor::from_vector(v, Shape{1, ph, pw, 1}).to(x.dtype());
      });
  return add(padded, border);
}

Tensor ResizingLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  (void)compute_output_shape(x_in.shape());
  Tensor x = autocast(x_in);
  if (x.numel() > 0 && options_.crop_to_aspect_ratio)
    x = crop_to_aspect_ratio(x, options_.height, options_.width, name(), ctx);
  if (x.numel() > 0 && options_.pad_to_aspect_ratio) x = pad_to_aspect_ratio(x);
  return resize_images(x, options_.height, options_.width, parse_interpolation(options_.interpolation, "Resizing"),
                       options_.antialias);
}

json ResizingLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"height", options_.height},
            {"width", options_.width},
            {"interpolation", options_.interpolation},
            {"crop_to_aspect_ratio", options_.crop_to_aspect_ratio},
            {"pad_to_aspect_ratio", options_.pad_to_aspect_ratio},
            {"fill_value", options_.fill_value},
            {"antialias", options_.antialias}});
  return c;
}

LayerPtr ResizingLayer::from_config(const json& c) {
  auto r = layer_config_reader("Resizing", c);
  return std::make_shared<ResizingLayer>(ResizingOptions{.height = r.integer("height"),
                                                         .width = r.integer("width"),
                                                         .interpolation = r.string("interpolation", "bilinear"),
                                                         .crop_to_aspect_ratio = r.boolean("crop_to_aspect_ratio", false),
                                                         .pad_to_aspect_ratio = r.boolean("pad_to_aspect_ratio", false),
                                                         .fill_value = r.real("fill_value", 0.0f),
                                                         .antialias = r.boolean("antialias", false),
                                                         .name = r.string("name")});
}

CenterCropLayer::CenterCropLayer(std::int64_t height, std::int64_t width, std::string name)
    : Layer(std::move(name)), height_(height), width_(width) {
  LOCKSTEP_CHECK(height > 0 && width > 0, "CenterCrop: height and width must be positive, got ", height,
                 " and ", width);
}

Shape CenterCropLayer::compute_output_shape(const Shape& s) const {
  check_images(*this, s);
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
  auto r = layer_config_reader("CenterCrop", c);
  return std::make_shared<CenterCropLayer>(r.integer("height"), r.integer("width"), r.string("name"));
}

// ---- RandomCrop (random_crop.py) ----
namespace {
// Float32 holds whole numbers exactly below 2^24.
constexpr std::int64_t kExactFloats = std::int64_t{1} << 24;

// The (height, width) window at (h0, w0) (whole numbers, float32 (1, 1) on x's device) of each
// image of x (fewer than 2^24 pixels in all): one gather of the window's pixels, at
// (b h + h0 + i) w + w0 + j, computed on the device from kept constants (each image's first
// pixel, the window's pixels at (0, 0)): its cost the window's, not the images'.
Tensor gather_window(const Tensor& x, const Tensor& h0, const Tensor& w0, std::int64_t height, std::int64_t width) {
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const Tensor firsts = device_constant({"RandomCrop first pixels: h, w", {h, w}}, n, [&](std::int64_t r) {
    std::vector<float> v(static_cast<std::size_t>(r));
    for (std::int64_t b = 0; b < r; ++b) v[static_cast<std::size_t>(b)] = static_cast<float>(b * h * w);
    return Tensor::from_vector(v, Shape{r, 1, 1});
  });
  const Tensor window =
      device_constant({"RandomCrop window pixels: w, height, width", {w, height, width}}, 1, [&](std::int64_t) {
        std::vector<float> v;
        for (std::int64_t i = 0; i < height; ++i)
          for (std::int64_t j = 0; j < width; ++j) v.push_back(static_cast<float>(i * w + j));
        return Tensor::from_vector(v, Shape{1, height, width});
      });
  const Tensor at = add(scale(h0, static_cast<float>(w)), w0);
  const Tensor index = cast(add(add(firsts, window), at), DType::kI64).reshape(Shape{n * height * width});
  return reshape(gather_rows(reshape(x, Shape{n * h * w, c}), index), Shape{n, height, width, c});
}
}  // namespace

RandomCropLayer::RandomCropLayer(std::int64_t height, std::int64_t width, std::optional<std::int64_t> seed,
                                 std::string name)
    : Layer(std::move(name)), height_(height), width_(width), seed_(seed) {
  LOCKSTEP_CHECK(height > 0 && width > 0, "RandomCrop: height and width must be positive, got ", height, " and ",
                 width);
}

Shape RandomCropLayer::compute_output_shape(const Shape& s) const {
  check_images(*this, s);
  return Shape{s[0], height_, width_, s[3]};
}

void RandomCropLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  constexpr std::uint64_t kTag = 0x52616e6443726f70ULL;  // "RandCrop"
  stream_ = layer_stream(kTag, seed_, seed);
}

Tensor RandomCropLayer::random_crop(const Tensor& x, const CallContext& ctx) const {
  // Keras: h_start = int(uniform((), 0, in_height - height + 1)), w_start likewise, one pair for
  // the batch; the clip keeps float32's rounding of u * (room + 1) within the room.
  const auto start = [&](std::uint64_t stream, std::int64_t room) {
    const Tensor u = uniform(Shape{1, 1}, DType::kF32, batch_random_key(ctx, stream, seed_));
    const Tensor truncated = cast(cast(scale(u, static_cast<float>(room + 1)), DType::kI64), DType::kF32);
    return clip(truncated, 0.0f, static_cast<float>(room));
  };
  const Tensor h0 = start(stream_, x.dim(1) - height_), w0 = start(mix_seed(stream_, 1), x.dim(2) - width_);
  if (x.dim(0) * x.dim(1) * x.dim(2) < kExactFloats) return gather_window(x, h0, w0, height_, width_);
  // A batch of 2^24 pixels or more (affine_transform transforms it in parts): the shift by (h0, w0),
  // [1, 0, w0, 0, 1, h0, 0, 0], read nearest: every pixel of the window at (0, 0) is the input's
  // at (h0 + i, w0 + j) exactly; then that window.
  const auto row = [](const char* what, std::vector<float> v) {
    return device_constant({what}, 1, [&](std::int64_t) { return Tensor::from_vector(v, Shape{1, 8}); });
  };
  const Tensor identity = row("RandomCrop identity transform", {1, 0, 0, 0, 1, 0, 0, 0});
  const Tensor at_w = row("RandomCrop transform: w entry", {0, 0, 1, 0, 0, 0, 0, 0});
  const Tensor at_h = row("RandomCrop transform: h entry", {0, 0, 0, 0, 0, 1, 0, 0});
  const Tensor shift = add(identity, add(mul(at_w, w0), mul(at_h, h0)));
  const Tensor shifted = affine_transform(x, shift, Interpolation::kNearest, FillMode::kConstant);
  return crop_images(shifted, 0, 0, height_, width_, name(), ctx);
}

Tensor RandomCropLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  (void)compute_output_shape(x_in.shape());
  const Tensor x = autocast(x_in);  // Keras casts to the compute dtype in both modes
  if (x.numel() == 0) return resize_images(x, height_, width_, Interpolation::kBilinear, false);
  if (ctx.training && x.dim(1) == height_ && x.dim(2) == width_) return x;  // the one window
  // Keras documents the random window for images not smaller than the target; Keras 3.15.1's code
  // draws only where both sides exceed it (input_height > height and input_width > width) and takes
  // the centre otherwise, so an image as high as the target but wider is cropped at its centre there.
  if (ctx.training && x.dim(1) >= height_ && x.dim(2) >= width_) return random_crop(x, ctx);
  // Inference, or images smaller than the target: Keras' documented centre crop to the target's
  // aspect ratio, resized. Keras 3.15.1 returns inference inputs unchanged instead, an output of
  // another shape than its compute_output_shape (keras-team/keras issue #21868; the fix,
  // keras-team/keras PR #22328, crops in inference too).
  return resize_images(crop_to_aspect_ratio(x, height_, width_, name(), ctx), height_, width_,
                       Interpolation::kBilinear, false);
}

json RandomCropLayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"height", height_}, {"width", width_}, {"seed", seed_to_json(seed_)}});
  return c;
}

LayerPtr RandomCropLayer::from_config(const json& c) {
  auto r = layer_config_reader("RandomCrop", c);
  return std::make_shared<RandomCropLayer>(r.integer("height"), r.integer("width"), seed_from_config(c), r.string("name"));
}

LayerPtr Resizing(std::int64_t height, std::int64_t width, const std::string& interpolation,
                  bool crop_to_aspect_ratio) {
  return std::make_shared<ResizingLayer>(height, width, interpolation, crop_to_aspect_ratio);
}
LayerPtr Resizing(const ResizingOptions& options) { return std::make_shared<ResizingLayer>(options); }
LayerPtr CenterCrop(std::int64_t height, std::int64_t width) {
  return std::make_shared<CenterCropLayer>(height, width);
}
LayerPtr RandomCrop(std::int64_t height, std::int64_t width, std::optional<std::int64_t> seed) {
  return std::make_shared<RandomCropLayer>(height, width, seed);
}

}  // namespace lockstep::layers
