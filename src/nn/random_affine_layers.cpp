#include "lockstep/layers/random_affine_layers.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/ops_random.hpp"
#include "nn/image_layer_args.hpp"
#include "nn/random_draws.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
using nlohmann::json;

constexpr double kPi = 3.14159265358979323846;

// Keras' interpolation names of these layers (_SUPPORTED_INTERPOLATION).
Interpolation affine_interpolation(const std::string& name, const char* cls) {
  LOCKSTEP_CHECK(name == "nearest" || name == "bilinear", cls, ": Unknown `interpolation` ", name,
                 ". Expected of one ('nearest', 'bilinear') (Keras' names)");
  return parse_interpolation(name, cls);
}

// RandomTranslation's and RandomZoom's own _set_factor: a pair sorted, a number f (-|f|, |f|),
// every number checked by _check_factor_range: in [-1, 1] for RandomTranslation, (-1, 1] for
// RandomZoom (`open_below`).
std::pair<float, float> own_factor(const char* cls, const char* arg, const KerasFactor& f, bool open_below) {
  const char* range = open_below ? "(-1.0, 1.0]" : "[-1.0, 1.0]";
  LOCKSTEP_CHECK(f.size() == 1 || f.size() == 2, cls, ": the `", arg,
                 "` argument should be a number (or a list of two numbers) in the range ", range,
                 ". Received: ", arg, "=", floats_str(f));
  for (const float v : f)
    LOCKSTEP_CHECK(v <= 1.0f && (open_below ? v > -1.0f : v >= -1.0f), cls, ": the `", arg,
                   "` argument should be a number (or a list of two numbers) in the range ", range,
                   ". Received: input_number=", v);
  if (f.size() == 1) return {-std::fabs(f[0]), std::fabs(f[0])};
  return {std::min(f[0], f[1]), std::max(f[0], f[1])};
}

// A factor as Keras writes it: a number, or the list as given.
json factor_json(const KerasFactor& f) { return f.size() == 1 ? json(f[0]) : json(f); }

// A float32 (n, 1) column of v on the current device.
Tensor constant_column(std::int64_t n, float v) {
  std::int32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return device_constant({"random affine column: float bits", {bits}}, n, [&](std::int64_t r) {
    return Tensor::full(Shape{r, 1}, v);
  });
}

// Transforms (n, 8) [a0, a1, a2, b0, b1, b2, 0, 0] from (n, 1) columns (Keras' layers' matrices
// have no projective part).
Tensor affine_rows(const Tensor& a0, const Tensor& a1, const Tensor& a2, const Tensor& b0, const Tensor& b1,
                   const Tensor& b2) {
  const Tensor zeros = constant_column(a0.dim(0), 0.0f);
  return concatenate({a0, a1, a2, b0, b1, b2, zeros, zeros}, 1);
}

// Keras' random.uniform(minval=lo, maxval=hi) from a unit draw u: lo + u * (hi - lo).
Tensor in_range(const Tensor& u, double lo, double hi) {
  const auto l = static_cast<float>(lo), h = static_cast<float>(hi);
  return add_scalar(scale(u, h - l), l);
}

// The Taylor coefficients of x^(first + 2k), (-1)^k / (first + 2k)!, up to x^20: cos (first 0),
// sin / x (first 1).
std::vector<double> taylor(int first) {
  std::vector<double> c;
  double factorial = 1.0;  // first!
  for (int p = first; p <= 20; p += 2) {
    c.push_back(((p - first) / 2 % 2 ? -1.0 : 1.0) / factorial);
    factorial *= (p + 1.0) * (p + 2.0);
  }
  return c;
}

// c[0] + c[1] y + c[2] y^2 + ..., Horner's order.
Tensor polynomial(const Tensor& y, const std::vector<double>& c) {
  Tensor s = scale(y, static_cast<float>(c.back()));
  for (std::size_t k = c.size() - 1; k-- > 1;) s = mul(add_scalar(s, static_cast<float>(c[k])), y);
  return add_scalar(s, static_cast<float>(c[0]));
}

// sin and cos of angles in degrees (Keras: of angle * pi / 180) from elementwise ops: the angle
// brought into [-180, 180] by whole turns, then the Taylor series to x^19 and x^20 (their error
// below 1e-9 on [-pi, pi]; float32 rounding dominates, a few 1e-7).
std::pair<Tensor, Tensor> sin_cos_degrees(const Tensor& degrees) {
  // Whole turns off by truncation (the int64 cast): into (-360, 360), then into [-180, 180].
  const auto turns_off = [](const Tensor& a, float per) {
    return sub(a, scale(cast(cast(scale(a, 1.0f / per), DType::kI64), DType::kF32), 360.0f));
  };
  const Tensor x = scale(turns_off(turns_off(degrees, 360.0f), 180.0f), static_cast<float>(kPi / 180.0));
  const Tensor x2 = mul(x, x);
  return {mul(x, polynomial(x2, taylor(1))), polynomial(x2, taylor(0))};
}
}  // namespace

// ---- RandomAffineLayer ----
RandomAffineLayer::RandomAffineLayer(RandomAffineOptions options, std::uint64_t tag, const char* cls)
    : Layer(options.name),
      options_(std::move(options)),
      interpolation_(affine_interpolation(options_.interpolation, cls)),
      fill_mode_(parse_fill_mode(options_.fill_mode, cls)),
      tag_(tag) {}

Shape RandomAffineLayer::compute_output_shape(const Shape& s) const {
  check_images(*this, s);
  return s;
}

void RandomAffineLayer::build_impl(const Shape& s, std::uint64_t seed) {
  check_images(*this, s);
  stream_ = layer_stream(tag_, options_.seed, seed);
}

Tensor RandomAffineLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  check_images(*this, x_in.shape());
  const Tensor x = autocast(x_in);  // Keras' transform_images casts to the compute dtype in both modes
  if (!ctx.training || x.numel() == 0) return x;
  std::vector<Tensor> draws;
  for (int j = 0; j < draw_count(); ++j) {
    const std::uint64_t stream = j == 0 ? stream_ : mix_seed(stream_, static_cast<std::uint64_t>(j));
    draws.push_back(uniform(Shape{x.dim(0), 1}, DType::kF32, random_key(ctx, stream, options_.seed)));
  }
  return affine_transform(x, transforms(draws, x.dim(1), x.dim(2)), interpolation_, fill_mode_,
                          options_.fill_value);
}

json RandomAffineLayer::get_config() const {
  json c = Layer::get_config();
  c["fill_mode"] = options_.fill_mode;
  c["interpolation"] = options_.interpolation;
  c["fill_value"] = options_.fill_value;
  c["seed"] = seed_to_json(options_.seed);
  return c;
}

namespace {
// The options the random affine layers share, read for class `cls`.
RandomAffineOptions affine_options(const json& c, const char* cls) {
  auto r = layer_config_reader(cls, c);
  RandomAffineOptions o;
  o.fill_mode = r.string("fill_mode", o.fill_mode);
  o.interpolation = r.string("interpolation", o.interpolation);
  o.fill_value = r.real("fill_value", o.fill_value);
  o.seed = seed_from_config(c);
  o.name = r.string("name");
  return o;
}
}  // namespace

RandomAffineOptions RandomAffineLayer::options_from_config(const json& c) {
  return affine_options(c, "random affine layer");
}

// ---- RandomTranslation (random_translation.py) ----
RandomTranslationLayer::RandomTranslationLayer(KerasFactor height_factor, KerasFactor width_factor,
                                               RandomAffineOptions options)
    : RandomAffineLayer(std::move(options), 0x52616e645472616eULL, "RandomTranslation"),
      height_factor_(std::move(height_factor)),
      width_factor_(std::move(width_factor)),
      height_(own_factor("RandomTranslation", "height_factor", height_factor_, false)),
      width_(own_factor("RandomTranslation", "width_factor", width_factor_, false)) {}

Tensor RandomTranslationLayer::transforms(const std::vector<Tensor>& draws, std::int64_t height,
                                          std::int64_t width) const {
  // Keras' _get_translation_matrix: [1, 0, -dx, 0, 1, -dy, 0, 0], dx, dy in pixels.
  const Tensor dy = scale(in_range(draws[0], height_.first, height_.second), static_cast<float>(height));
  const Tensor dx = scale(in_range(draws[1], width_.first, width_.second), static_cast<float>(width));
  const std::int64_t n = dx.dim(0);
  const Tensor one = constant_column(n, 1.0f), zero = constant_column(n, 0.0f);
  return affine_rows(one, zero, neg(dx), zero, one, neg(dy));
}

json RandomTranslationLayer::get_config() const {
  json c = RandomAffineLayer::get_config();
  c["height_factor"] = factor_json(height_factor_);
  c["width_factor"] = factor_json(width_factor_);
  return c;
}

LayerPtr RandomTranslationLayer::from_config(const json& c) {
  auto r = layer_config_reader("RandomTranslation", c);
  return std::make_shared<RandomTranslationLayer>(
      factor_from_json(r.value("height_factor"), "RandomTranslation", "height_factor"),
      factor_from_json(r.value("width_factor"), "RandomTranslation", "width_factor"),
      affine_options(c, "RandomTranslation"));
}

// ---- RandomRotation (random_rotation.py) ----
RandomRotationLayer::RandomRotationLayer(KerasFactor factor, RandomAffineOptions options)
    : RandomAffineLayer(std::move(options), 0x52616e64526f7461ULL, "RandomRotation"),
      factor_(keras_factor("RandomRotation", factor, -1.0f, 1.0f)) {}

Tensor RandomRotationLayer::transforms(const std::vector<Tensor>& draws, std::int64_t height,
                                       std::int64_t width) const {
  const Tensor degrees = in_range(draws[0], factor_.first * 360.0, factor_.second * 360.0);
  const auto [sine, cosine] = sin_cos_degrees(degrees);
  // Keras' _compute_affine_matrix with no translation or shear and scale 1, about the centre
  // (cx, cy) = ((width - 1) / 2, (height - 1) / 2): a2 = cx - cx a0 - cy a1, b2 = cy - cx b0 - cy b1.
  const float cx = 0.5f * static_cast<float>(width - 1), cy = 0.5f * static_cast<float>(height - 1);
  const Tensor a0 = cosine, a1 = neg(sine), b0 = sine, b1 = cosine;
  const Tensor a2 = sub(add_scalar(scale(a0, -cx), cx), scale(a1, cy));
  const Tensor b2 = sub(add_scalar(scale(b0, -cx), cy), scale(b1, cy));
  return affine_rows(a0, a1, a2, b0, b1, b2);
}

json RandomRotationLayer::get_config() const {
  json c = RandomAffineLayer::get_config();
  c["factor"] = json::array({factor_.first, factor_.second});
  return c;
}

LayerPtr RandomRotationLayer::from_config(const json& c) {
  // Keras' base layer reads a null factor as 0 (`factor or 0.0`).
  const json& f = layer_config_reader("RandomRotation", c).value("factor");
  return std::make_shared<RandomRotationLayer>(
      f.is_null() ? KerasFactor{0.0f} : factor_from_json(f, "RandomRotation", "factor"),
      affine_options(c, "RandomRotation"));
}

// ---- RandomZoom (random_zoom.py) ----
RandomZoomLayer::RandomZoomLayer(KerasFactor height_factor, std::optional<KerasFactor> width_factor,
                                 RandomAffineOptions options)
    : RandomAffineLayer(std::move(options), 0x52616e645a6f6f6dULL, "RandomZoom"),
      height_factor_(std::move(height_factor)),
      width_factor_(std::move(width_factor)),
      height_(own_factor("RandomZoom", "height_factor", height_factor_, true)),
      width_(width_factor_ ? own_factor("RandomZoom", "width_factor", *width_factor_, true) : height_) {}

Tensor RandomZoomLayer::transforms(const std::vector<Tensor>& draws, std::int64_t height,
                                   std::int64_t width) const {
  // Keras' _get_zoom_matrix: [zx, 0, (width - 1) / 2 (1 - zx), 0, zy, (height - 1) / 2 (1 - zy), 0, 0];
  // without a width_factor the width takes the height's zoom.
  const Tensor zy = in_range(draws[0], 1.0 + height_.first, 1.0 + height_.second);
  const Tensor zx = width_factor_ ? in_range(draws[1], 1.0 + width_.first, 1.0 + width_.second) : zy;
  const auto offset = [](const Tensor& z, std::int64_t len) {
    return scale(add_scalar(neg(z), 1.0f), (static_cast<float>(len) - 1.0f) / 2.0f);
  };
  const Tensor zero = constant_column(zx.dim(0), 0.0f);
  return affine_rows(zx, zero, offset(zx, width), zero, zy, offset(zy, height));
}

json RandomZoomLayer::get_config() const {
  json c = RandomAffineLayer::get_config();
  c["height_factor"] = factor_json(height_factor_);
  c["width_factor"] = width_factor_ ? factor_json(*width_factor_) : json(nullptr);
  return c;
}

LayerPtr RandomZoomLayer::from_config(const json& c) {
  auto r = layer_config_reader("RandomZoom", c);
  const json* w = r.raw("width_factor");
  return std::make_shared<RandomZoomLayer>(
      factor_from_json(r.value("height_factor"), "RandomZoom", "height_factor"),
      w ? std::optional(factor_from_json(*w, "RandomZoom", "width_factor")) : std::nullopt,
      affine_options(c, "RandomZoom"));
}

LayerPtr RandomTranslation(KerasFactor height_factor, KerasFactor width_factor, RandomAffineOptions options) {
  return std::make_shared<RandomTranslationLayer>(std::move(height_factor), std::move(width_factor),
                                                  std::move(options));
}
LayerPtr RandomRotation(KerasFactor factor, RandomAffineOptions options) {
  return std::make_shared<RandomRotationLayer>(std::move(factor), std::move(options));
}
LayerPtr RandomZoom(KerasFactor height_factor, std::optional<KerasFactor> width_factor,
                    RandomAffineOptions options) {
  return std::make_shared<RandomZoomLayer>(std::move(height_factor), std::move(width_factor),
                                           std::move(options));
}

}  // namespace lockstep::layers
