#include "lockstep/layers/affine_transform.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::layers {

namespace {
constexpr std::array<std::pair<FillMode, const char*>, 4> kModes{{{FillMode::kReflect, "reflect"},
                                                                  {FillMode::kWrap, "wrap"},
                                                                  {FillMode::kConstant, "constant"},
                                                                  {FillMode::kNearest, "nearest"}}};

// Pixel indices are computed in float32, exact below 2^24: the rows of one gather (images' pixels
// and the fill row) are kept below it, a batch past it transformed in parts.
constexpr std::int64_t kExactFloats = std::int64_t{1} << 24;

// v as a float32 (1,) constant on the current device (ops broadcast it).
Tensor scalar(float v) {
  std::int32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return device_constant({"affine_transform scalar: float bits", {bits}}, 1,
                         [&](std::int64_t) { return Tensor::from_vector(std::vector<float>{v}, Shape{1}); });
}

// C++'s static_cast<DenseIndex>(v), as float32: the int64 cast truncates toward zero.
Tensor truncated(const Tensor& v) { return cast(cast(v, DType::kI64), DType::kF32); }

// std::floor(v), exactly.
Tensor floored(const Tensor& v) {
  const Tensor t = truncated(v);
  return where(less(v, t), add_scalar(t, -1.0f), t);
}

// std::round(v): halves away from zero, exactly.
Tensor rounded(const Tensor& v) {
  const Tensor a = abs(v);
  const Tensor t = truncated(a);
  const Tensor r = where(greater_equal(sub(a, t), scalar(0.5f)), add_scalar(t, 1.0f), t);
  return where(less(v, scalar(0.0f)), neg(r), r);
}

// MapCoordinate<FILL_REFLECT> before its clamp (len > 1).
Tensor reflect(const Tensor& c, std::int64_t len) {
  const auto n = static_cast<float>(len), s = 2.0f * n;
  const Tensor two_len = scalar(s);
  Tensor below = add(scale(truncated(div(neg(c), two_len)), s), c);
  below = where(less(below, scalar(-n)), add_scalar(below, s), add_scalar(neg(below), -1.0f));
  Tensor above = sub(c, scale(truncated(div(c, two_len)), s));
  above = where(greater_equal(above, scalar(n)), add_scalar(sub(two_len, above), -1.0f), above);
  return where(less(c, scalar(0.0f)), below, where(greater(c, scalar(n - 1.0f)), above, c));
}

// MapCoordinate<FILL_WRAP> before its clamp (len > 1).
Tensor wrap(const Tensor& c, std::int64_t len) {
  const auto n = static_cast<float>(len);
  const Tensor period = scalar(n - 1.0f);
  const Tensor below = add(c, scale(add_scalar(truncated(div(neg(c), period)), 1.0f), n));
  const Tensor above = sub(c, scale(truncated(div(c, period)), n));
  return where(less(c, scalar(0.0f)), below, where(greater(c, scalar(n - 1.0f)), above, c));
}

// image_ops.h's MapCoordinate for fill_mode (FillMode's comment says each rule).
Tensor map_coordinate(const Tensor& c, std::int64_t len, FillMode mode) {
  if (mode == FillMode::kConstant) return c;
  Tensor mapped = c;
  if (len > 1 && mode == FillMode::kReflect) mapped = reflect(c, len);
  if (len > 1 && mode == FillMode::kWrap) mapped = wrap(c, len);
  return clip(mapped, 0.0f, static_cast<float>(len - 1));
}

// Output pixel coordinates as float32 (1, h, w): the column (x) where `column`, else the row (y).
Tensor grid(std::int64_t h, std::int64_t w, bool column) {
  return device_constant({"affine_transform grid: h, w, column", {h, w, column ? 1 : 0}}, 1,
                         [&](std::int64_t) {
                           std::vector<float> v(static_cast<std::size_t>(h * w));
                           for (std::int64_t i = 0; i < h; ++i)
                             for (std::int64_t j = 0; j < w; ++j)
                               v[static_cast<std::size_t>(i * w + j)] = static_cast<float>(column ? j : i);
                           return Tensor::from_vector(v, Shape{1, h, w});
                         });
}

// Entry k of every transform, (rows, 1, 1): row k of the transposed transforms (8, rows).
Tensor entry(const Tensor& columns, std::int64_t k) {
  const Tensor index = device_constant({"affine_transform entry", {k}}, 1, [&](std::int64_t) {
    return Tensor::from_vector(std::vector<std::int64_t>{k}, Shape{1});
  });
  return reshape(gather_rows(columns, index), Shape{columns.dim(1), 1, 1});
}

// The images' pixels as rows (n h w, c), then one row of fill_value: what out-of-image taps read.
struct Source {
  Tensor rows;
  Tensor offsets;  // (n, 1, 1): the first row of each image
  std::int64_t n, h, w, c;
};

Source source(const Tensor& x, float fill_value) {
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  std::int32_t bits = 0;
  std::memcpy(&bits, &fill_value, sizeof bits);
  const Tensor fill =
      device_constant({"affine_transform fill row: channels, float bits", {c, bits}}, 1, [&](std::int64_t) {
        return Tensor::full(Shape{1, c}, fill_value);
      });
  const Tensor offsets =
      device_constant({"affine_transform image offsets: h, w", {h, w}}, n, [&](std::int64_t r) {
        std::vector<float> v(static_cast<std::size_t>(r));
        for (std::int64_t b = 0; b < r; ++b) v[static_cast<std::size_t>(b)] = static_cast<float>(b * h * w);
        return Tensor::from_vector(v, Shape{r, 1, 1});
      });
  return {concatenate({reshape(x, Shape{n * h * w, c}), fill}, 0), offsets, n, h, w, c};
}

// The pixels at integer-valued coordinates (yy, xx), (n, h, w, c): image_ops.h's
// read_with_fill_value, a coordinate outside the image reading the fill row.
Tensor read(const Source& s, const Tensor& yy, const Tensor& xx) {
  const Tensor fill_row = scalar(static_cast<float>(s.n * s.h * s.w));
  Tensor flat = add(s.offsets, add(scale(yy, static_cast<float>(s.w)), xx));
  for (const auto& [v, len] : {std::pair{yy, s.h}, std::pair{xx, s.w}}) {
    flat = where(less(v, scalar(0.0f)), fill_row, flat);
    flat = where(greater(v, scalar(static_cast<float>(len - 1))), fill_row, flat);
  }
  const Tensor index = cast(flat, DType::kI64).reshape(Shape{s.n * s.h * s.w});
  return reshape(gather_rows(s.rows, index), Shape{s.n, s.h, s.w, s.c});
}

// image_ops.h's bilinear_interpolation at (ys, xs), its weights in its order.
Tensor bilinear(const Source& s, const Tensor& ys, const Tensor& xs) {
  // A point more than a pixel outside reads only fill along that axis: clamped there, weights (1, 0).
  const Tensor y = clip(ys, -2.0f, static_cast<float>(s.h + 1)),
               x = clip(xs, -2.0f, static_cast<float>(s.w + 1));
  const Tensor y0 = floored(y), x0 = floored(x);
  const Tensor y1 = add_scalar(y0, 1.0f), x1 = add_scalar(x0, 1.0f);
  const Shape weights{y.dim(0), s.h, s.w, 1};
  const Tensor wx0 = reshape(sub(x1, x), weights), wx1 = reshape(sub(x, x0), weights);
  const Tensor wy0 = reshape(sub(y1, y), weights), wy1 = reshape(sub(y, y0), weights);
  const Tensor top = add(mul(wx0, read(s, y0, x0)), mul(wx1, read(s, y0, x1)));
  const Tensor bottom = add(mul(wx0, read(s, y1, x0)), mul(wx1, read(s, y1, x1)));
  return add(mul(wy0, top), mul(wy1, bottom));
}

// affine_transform of images whose pixels and fill row index exactly in float32.
Tensor transform_part(const Tensor& images, const Tensor& transforms, Interpolation interpolation,
                      FillMode mode, float fill_value) {
  const Source s = source(cast(images, DType::kF32), fill_value);
  const Tensor columns = transpose(transforms, {1, 0});  // (8, rows)
  const Tensor gx = grid(s.h, s.w, true), gy = grid(s.h, s.w, false);
  // image_ops.h's ProjectiveGenerator, in its float32 order.
  const Tensor k = add_scalar(add(mul(entry(columns, 6), gx), mul(entry(columns, 7), gy)), 1.0f);
  const Tensor x_in =
      div(add(add(mul(entry(columns, 0), gx), mul(entry(columns, 1), gy)), entry(columns, 2)), k);
  const Tensor y_in =
      div(add(add(mul(entry(columns, 3), gx), mul(entry(columns, 4), gy)), entry(columns, 5)), k);
  // An output where k = 0 is fill_value: its point is put two pixels outside, where only fill is read.
  const Tensor degenerate = equal(k, scalar(0.0f));
  const Tensor outside = scalar(-2.0f);
  const Tensor xs = where(degenerate, outside, map_coordinate(x_in, s.w, mode));
  const Tensor ys = where(degenerate, outside, map_coordinate(y_in, s.h, mode));
  const Tensor out = interpolation == Interpolation::kNearest
                         ? read(s, rounded(clip(ys, -1.0f, static_cast<float>(s.h))),
                                rounded(clip(xs, -1.0f, static_cast<float>(s.w))))
                         : bilinear(s, ys, xs);
  return cast(out, images.dtype());
}
}  // namespace

FillMode parse_fill_mode(const std::string& name, const char* cls) {
  for (const auto& [mode, n] : kModes)
    if (name == n) return mode;
  throw ValueError(
      detail::concat(cls, ": Unknown `fill_mode` ", name,
                     ". Expected of one ('reflect', 'wrap', 'constant', 'nearest') (Keras' modes)"));
}

const char* fill_mode_name(FillMode mode) {
  for (const auto& [m, n] : kModes)
    if (m == mode) return n;
  return "?";
}

Tensor affine_transform(const Tensor& images, const Tensor& transforms, Interpolation interpolation,
                        FillMode fill_mode, float fill_value) {
  LOCKSTEP_CHECK(images.rank() == 4, "affine_transform: needs images (batch, height, width, channels), got ",
                 images.shape().str());
  LOCKSTEP_CHECK(transforms.rank() == 2 && transforms.dim(1) == 8 &&
                     (transforms.dim(0) == 1 || transforms.dim(0) == images.dim(0)),
                 "affine_transform: transforms must be (", images.dim(0), ", 8) or (1, 8), got ",
                 transforms.shape().str());
  LOCKSTEP_CHECK(interpolation == Interpolation::kNearest || interpolation == Interpolation::kBilinear,
                 "affine_transform: interpolation '", interpolation_name(interpolation),
                 "' is not supported: Keras' are \"nearest\" and \"bilinear\"");
  if (images.numel() == 0) return images;
  const std::int64_t n = images.dim(0), h = images.dim(1), w = images.dim(2), c = images.dim(3);
  // The transforms are float32 (Keras casts them) and get no gradient (TensorFlow gives none).
  const Tensor t = stop_gradient(cast(transforms, DType::kF32));
  const std::int64_t per_part = (kExactFloats - 1) / (h * w);
  LOCKSTEP_CHECK(per_part >= 1, "affine_transform: images of ", h, " x ", w,
                 " pixels are past the 2^24 - 1 pixels that float32 indexes exactly");
  if (n <= per_part) return transform_part(images, t, interpolation, fill_mode, fill_value);
  // A batch past 2^24 pixels: transformed in parts of whole images, gathered out and concatenated.
  const Tensor flat = reshape(images, Shape{n, h * w * c});
  std::vector<Tensor> parts;
  for (std::int64_t first = 0; first < n; first += per_part) {
    const std::int64_t rows = std::min(n - first, per_part);
    const Tensor index =
        device_constant({"affine_transform part rows: first", {first}}, rows, [&](std::int64_t r) {
          std::vector<std::int64_t> v(static_cast<std::size_t>(r));
          std::iota(v.begin(), v.end(), first);
          return Tensor::from_vector(v, Shape{r});
        });
    const Tensor part = reshape(gather_rows(flat, index), Shape{rows, h, w, c});
    parts.push_back(transform_part(part, t.dim(0) == 1 ? t : gather_rows(t, index), interpolation, fill_mode,
                                   fill_value));
  }
  return concatenate(parts, 0);
}

}  // namespace lockstep::layers
