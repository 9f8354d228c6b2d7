#include "lockstep/layers/preprocessing_layers.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/tensor/device_constant.hpp"
#include "lockstep/tensor/ops_random.hpp"
#include "nn/image_layer_args.hpp"
#include "nn/random_draws.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
using nlohmann::json;

// Keras' backend.epsilon(), the floor of Normalization's standard deviation.
constexpr float kKerasEpsilon = 1e-7f;

std::string axes_str(const std::optional<std::vector<std::int64_t>>& axis) {
  if (!axis) return "None";
  std::string s = "(";
  for (std::size_t i = 0; i < axis->size(); ++i) s += (i ? ", " : "") + std::to_string((*axis)[i]);
  return s + (axis->size() == 1 ? ",)" : ")");
}

// Keras' mean / variance argument (a number, or nested lists of them, as np.array(...).tolist()
// writes it) flattened in row-major order; null: not given.
std::optional<std::vector<float>> values_from_json(const json& j, const char* what) {
  if (j.is_null()) return std::nullopt;
  std::vector<float> out;
  const std::function<void(const json&)> visit = [&](const json& v) {
    if (v.is_number())
      out.push_back(v.get<float>());
    else if (v.is_array())
      for (const auto& e : v) visit(e);
    else
      throw ValueError(std::string("Normalization: ") + what +
                       " must be a number or a list of numbers, got " + v.dump().substr(0, 200));
  };
  visit(j);
  return out;
}

json values_to_json(const std::optional<std::vector<float>>& v) {
  if (!v) return nullptr;
  if (v->size() == 1) return (*v)[0];
  return *v;
}

std::atomic<std::int64_t> next_constant_id{1};
}  // namespace

// ---- Normalization ----
NormalizationLayer::NormalizationLayer(NormalizationOptions options)
    : Layer(options.name), options_(std::move(options)), constant_id_(next_constant_id.fetch_add(1)) {
  const auto& o = options_;
  LOCKSTEP_CHECK(
      o.mean.has_value() == o.variance.has_value(),
      "Normalization: when setting values directly, both `mean` and `variance` must be set (Keras' rule)");
  if (o.mean) {
    LOCKSTEP_CHECK(o.mean->size() == o.variance->size() && !o.mean->empty(),
                   "Normalization: `mean` and `variance` must have the same shape, got ", o.mean->size(),
                   " and ", o.variance->size(), " values");
    for (float v : *o.variance)
      LOCKSTEP_CHECK(std::isfinite(v) && v >= 0.0f,
                     "Normalization: a variance must be a finite value >= 0, got ", v);
  }
}

std::vector<std::int64_t> NormalizationLayer::kept_axes(std::int64_t rank) const {
  std::vector<std::int64_t> kept;
  if (!options_.axis) return kept;
  for (std::int64_t a : *options_.axis) {
    LOCKSTEP_CHECK(a >= -rank && a < rank, "layer '", name(),
                   "' (Normalization): all `axis` values must be in the ",
                   "range [-ndim, ndim); got inputs of rank ", rank, " with axis=", axes_str(options_.axis));
    const std::int64_t d = a < 0 ? a + rank : a;
    LOCKSTEP_CHECK(
        d != 0, "layer '", name(), "' (Normalization): axis=", axes_str(options_.axis),
        " keeps the batch axis 0, which lockstep does not support (each example would have its own "
        "statistics); use the feature axes, or axis=None");
    if (std::find(kept.begin(), kept.end(), d) == kept.end()) kept.push_back(d);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

void NormalizationLayer::build_impl(const Shape& s, std::uint64_t seed) {
  const std::vector<std::int64_t> kept = kept_axes(static_cast<std::int64_t>(s.rank()));
  std::vector<std::int64_t> bdims(static_cast<std::size_t>(s.rank()), 1);
  std::vector<std::int64_t> kdims;
  for (std::int64_t d : kept) {
    LOCKSTEP_CHECK(s[d] > 0, "layer '", name(),
                   "' (Normalization): all `axis` values to be kept must have a known ",
                   "shape; got axis=", axes_str(options_.axis), " and input shape ", s.str());
    bdims[static_cast<std::size_t>(d)] = s[d];
    kdims.push_back(s[d]);
  }
  broadcast_shape_ = Shape(bdims);
  const Shape kept_shape(kdims);
  if (options_.mean) {
    const auto n = static_cast<std::size_t>(kept_shape.numel());
    LOCKSTEP_CHECK(options_.mean->size() == 1 || options_.mean->size() == n, "layer '", name(),
                   "' (Normalization): mean and variance have ", options_.mean->size(),
                   " values, which do not broadcast to the kept axes' shape ", kept_shape.str());
    return;
  }
  mean_ = add_weight("mean", kept_shape, Initializer{"zeros"}, mix_seed(seed, 1), /*trainable=*/false);
  variance_ = add_weight("variance", kept_shape, Initializer{"ones"}, mix_seed(seed, 2), /*trainable=*/false);
  count_ = add_weight("count", Shape{}, Initializer{"zeros"}, mix_seed(seed, 3), /*trainable=*/false);
}

Tensor NormalizationLayer::call(const Tensor& x_in, const CallContext&) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (Normalization) is called before it was built");
  const Shape& built_shape = input_shape();
  bool same = x_in.rank() == built_shape.rank();
  for (std::int64_t d = 1; same && d < static_cast<std::int64_t>(x_in.rank()); ++d)
    same = broadcast_shape_[d] == 1 || x_in.dim(d) == broadcast_shape_[d];
  LOCKSTEP_CHECK(same, "layer '", name(), "' (Normalization) was built for inputs ", built_shape.str(),
                 " but receives ", x_in.shape().str());
  const Tensor x = autocast(x_in);
  const DType dt = x.dtype();
  Tensor mean, variance;
  if (options_.mean) {
    const auto constant = [&](int which) {
      const std::vector<float>& given = which == 0 ? *options_.mean : *options_.variance;
      return device_constant({"Normalization given mean / variance: layer, which, dtype",
                              {constant_id_, which, static_cast<std::int64_t>(dt)}},
                             1, [&](std::int64_t) {
                               std::vector<float> v(static_cast<std::size_t>(broadcast_shape_.numel()),
                                                    given[0]);
                               if (given.size() > 1) v = given;
                               return Tensor::from_vector(v, broadcast_shape_).to(dt);
                             });
    };
    mean = constant(0);
    variance = constant(1);
  } else {
    mean = reshape(autocast(mean_.value()), broadcast_shape_);
    variance = reshape(autocast(variance_.value()), broadcast_shape_);
  }
  const Tensor stddev = clip(sqrt(variance), kKerasEpsilon, std::numeric_limits<float>::infinity());
  return options_.invert ? add(mul(x, stddev), mean) : div(sub(x, mean), stddev);
}

void NormalizationLayer::adapt(const std::vector<Tensor>& batches) {
  LOCKSTEP_CHECK(!options_.mean, "layer '", name(),
                 "' (Normalization) has its mean and variance given, so adapt() ",
                 "has nothing to set (Keras keeps given values as constants)");
  LOCKSTEP_CHECK(!batches.empty(), "layer '", name(), "' (Normalization): adapt() received no batches");
  if (!built()) {
    std::vector<std::int64_t> dims = batches[0].shape().dims();
    LOCKSTEP_CHECK(!dims.empty(), "layer '", name(),
                   "' (Normalization): adapt() needs batched data, got a scalar");
    dims[0] = -1;
    build(Shape(dims), 0);
  }
  const Shape& built_shape = input_shape();
  const auto rank = static_cast<std::int64_t>(built_shape.rank());
  const auto kept_n = static_cast<std::size_t>(std::max<std::int64_t>(mean_.shape().numel(), 1));
  std::vector<double> total_mean(kept_n, 0.0), total_var(kept_n, 0.0);
  double total_count = 0.0;
  for (const Tensor& batch : batches) {
    bool fits = static_cast<std::int64_t>(batch.rank()) == rank;
    for (std::int64_t d = 1; fits && d < rank; ++d)
      fits = broadcast_shape_[d] == 1 || batch.dim(d) == broadcast_shape_[d];
    LOCKSTEP_CHECK(fits, "layer '", name(), "' (Normalization) was built with input shape ",
                   built_shape.str(), " but adapt() received data of an incompatible shape ",
                   batch.shape().str());
    LOCKSTEP_CHECK(is_floating(batch.dtype()) || batch.dtype() == DType::kI32 ||
                       batch.dtype() == DType::kI64 || batch.dtype() == DType::kU8,
                   "layer '", name(), "' (Normalization): adapt() takes numeric data, got ",
                   dtype_name(batch.dtype()));
    if (batch.numel() == 0) continue;
    const std::vector<float> v = batch.on_host().to(DType::kF32).to_vector<float>();
    // Each element's index among the kept axes: row-major over the kept dimensions.
    const std::vector<std::int64_t>& dims = batch.shape().dims();
    std::vector<std::size_t> kept_of(v.size());
    std::vector<std::int64_t> idx(static_cast<std::size_t>(rank), 0);
    for (std::size_t e = 0; e < v.size(); ++e) {
      std::size_t k = 0;
      for (std::int64_t d = 0; d < rank; ++d)
        if (broadcast_shape_[d] != 1)
          k = k * static_cast<std::size_t>(dims[d]) + static_cast<std::size_t>(idx[d]);
      kept_of[e] = k;
      for (std::int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[static_cast<std::size_t>(d)] < dims[static_cast<std::size_t>(d)]) break;
        idx[static_cast<std::size_t>(d)] = 0;
      }
    }
    const double count = static_cast<double>(v.size() / kept_n);
    std::vector<double> mean(kept_n, 0.0), var(kept_n, 0.0);
    for (std::size_t e = 0; e < v.size(); ++e) mean[kept_of[e]] += v[e];
    for (double& m : mean) m /= count;
    for (std::size_t e = 0; e < v.size(); ++e) {
      const double dev = v[e] - mean[kept_of[e]];
      var[kept_of[e]] += dev * dev;
    }
    for (double& s : var) s /= count;
    // Keras' combination of a batch into the running statistics (normalization.py's adapt over a dataset).
    total_count += count;
    const double w = count / total_count;
    for (std::size_t k = 0; k < kept_n; ++k) {
      const double new_mean = total_mean[k] * (1.0 - w) + mean[k] * w;
      const double a = total_mean[k] - new_mean, b = mean[k] - new_mean;
      total_var[k] = (total_var[k] + a * a) * (1.0 - w) + (var[k] + b * b) * w;
      total_mean[k] = new_mean;
    }
  }
  LOCKSTEP_CHECK(total_count > 0, "layer '", name(),
                 "' (Normalization): adapt() received only empty batches");
  const auto assign = [](const Variable& var, const std::vector<double>& values) {
    const std::vector<float> f(values.begin(), values.end());
    var.assign(Tensor::from_vector(f, var.shape()).to(var.value().device()));
  };
  assign(mean_, total_mean);
  assign(variance_, total_var);
}

Tensor NormalizationLayer::mean() const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (Normalization) is not built, so it has no statistics yet");
  if (!options_.mean) return mean_.read_value().on_host();
  const Shape kept = variance().shape();
  return Tensor::from_vector(
      options_.mean->size() == 1
          ? std::vector<float>(static_cast<std::size_t>(kept.numel()), (*options_.mean)[0])
          : *options_.mean,
      kept);
}

Tensor NormalizationLayer::variance() const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (Normalization) is not built, so it has no statistics yet");
  if (!options_.mean) return variance_.read_value().on_host();
  std::vector<std::int64_t> kdims;
  for (std::int64_t d = 1; d < static_cast<std::int64_t>(broadcast_shape_.rank()); ++d)
    if (broadcast_shape_[d] != 1) kdims.push_back(broadcast_shape_[d]);
  const Shape kept(kdims);
  return Tensor::from_vector(
      options_.variance->size() == 1
          ? std::vector<float>(static_cast<std::size_t>(kept.numel()), (*options_.variance)[0])
          : *options_.variance,
      kept);
}

json NormalizationLayer::get_config() const {
  json c = Layer::get_config();
  c["axis"] = options_.axis ? json(*options_.axis) : json::array();
  c["invert"] = options_.invert;
  c["mean"] = values_to_json(options_.mean);
  c["variance"] = values_to_json(options_.variance);
  return c;
}

LayerPtr NormalizationLayer::from_config(const json& c) {
  auto r = layer_config_reader("Normalization", c);
  NormalizationOptions o;
  const json& axis = c.contains("axis") ? r.value("axis") : json(-1);
  // Keras writes axis=None as [] (its tuple of kept axes).
  if (axis.is_null() || (axis.is_array() && axis.empty()))
    o.axis = std::nullopt;
  else if (axis.is_array())
    o.axis = r.integers("axis");
  else
    o.axis = std::vector<std::int64_t>{c.contains("axis") ? r.integer("axis") : -1};
  o.invert = r.boolean("invert", false);
  o.mean = values_from_json(r.raw("mean") ? *r.raw("mean") : json(), "mean");
  o.variance = values_from_json(r.raw("variance") ? *r.raw("variance") : json(), "variance");
  o.name = r.string("name");
  return std::make_shared<NormalizationLayer>(std::move(o));
}

// ---- RandomFlip ----
RandomFlipLayer::RandomFlipLayer(RandomFlipOptions options)
    : Layer(options.name), options_(std::move(options)) {
  const std::string& m = options_.mode;
  LOCKSTEP_CHECK(m == "horizontal" || m == "vertical" || m == "horizontal_and_vertical", "RandomFlip: mode '",
                 m,
                 "' is not one of \"horizontal\", \"vertical\", \"horizontal_and_vertical\" (Keras' modes)");
  horizontal_ = m != "vertical";
  vertical_ = m != "horizontal";
}

Shape RandomFlipLayer::compute_output_shape(const Shape& s) const {
  check_images(*this, s);
  return s;
}

void RandomFlipLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  stream_ = layer_stream(0x52616e646f6d466cULL, options_.seed, seed);
}

Tensor RandomFlipLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  (void)compute_output_shape(x_in.shape());
  const Tensor x = autocast(x_in);  // Keras' transform_images casts to the compute dtype in both modes
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  if (!ctx.training || x.numel() == 0) return x;
  const DType dt = x.dtype();
  // One coin per example from Dropout's generator: a unit of an all-ones (n, 1) kept (2, nonzero)
  // or dropped (0) with probability 1/2, where kept is flipped.
  const Tensor coins = kept_units(n, 1, dt, 0.5f, random_key(ctx, stream_, options_.seed));
  const bool hz = horizontal_, vt = vertical_;
  const Tensor index =
      device_constant({"RandomFlip rows: h, w, horizontal, vertical", {h, w, hz ? 1 : 0, vt ? 1 : 0}}, n,
                      [&](std::int64_t examples) {
                        std::vector<std::int64_t> v(static_cast<std::size_t>(examples * h * w));
                        std::size_t r = 0;
                        for (std::int64_t b = 0; b < examples; ++b)
                          for (std::int64_t i = 0; i < h; ++i)
                            for (std::int64_t j = 0; j < w; ++j)
                              v[r++] = (b * h + (vt ? h - 1 - i : i)) * w + (hz ? w - 1 - j : j);
                        return Tensor::from_vector(v, Shape{examples, h * w});
                      })
          .reshape(Shape{n * h * w});
  const Tensor flipped = reshape(gather_rows(reshape(x, Shape{n * h * w, c}), index), x.shape());
  return where(reshape(coins, Shape{n, 1, 1, 1}), flipped, x);
}

json RandomFlipLayer::get_config() const {
  json c = Layer::get_config();
  c["mode"] = options_.mode;
  c["seed"] = seed_to_json(options_.seed);
  return c;
}

LayerPtr RandomFlipLayer::from_config(const json& c) {
  auto r = layer_config_reader("RandomFlip", c);
  RandomFlipOptions o;
  o.mode = r.string("mode", "horizontal_and_vertical");
  o.seed = seed_from_config(c);
  o.name = r.string("name");
  return std::make_shared<RandomFlipLayer>(std::move(o));
}

// ---- RandomContrast, RandomBrightness (random_contrast.py, random_brightness.py) ----
namespace {

void check_value_range(const char* cls, const std::vector<float>& v) {
  LOCKSTEP_CHECK(v.size() == 2, cls, ": the `value_range` argument should be a list of two numbers. Received: ",
                 "value_range=", floats_str(v));
}


// One uniform draw in [lo, hi) per image of x, as (batch, 1, 1, 1): Keras' random.uniform(shape=
// (batch, 1, 1, 1), minval, maxval), minval + u * (maxval - minval), u the unit (example, 0) of
// a (batch, 1) uniform draw (keyed by the example's global index).
Tensor per_image_uniform(const Tensor& x, float lo, float hi, const DropoutKey& key) {
  const std::int64_t n = x.dim(0);
  const Tensor u = uniform(Shape{n, 1}, x.dtype(), key);
  return reshape(add_scalar(scale(u, hi - lo), lo), Shape{n, 1, 1, 1});
}

json color_config(json c, const RandomColorOptions& o, float lower, float upper) {
  c["factor"] = json::array({lower, upper});
  c["value_range"] = o.value_range;
  c["seed"] = seed_to_json(o.seed);
  return c;
}

// RandomBrightness' options with value_range checked and sorted (Keras' _set_value_range).
RandomColorOptions sorted_range(const char* cls, RandomColorOptions o) {
  check_value_range(cls, o.value_range);
  std::sort(o.value_range.begin(), o.value_range.end());
  return o;
}

RandomColorOptions color_options(const json& c, const char* cls) {
  auto r = layer_config_reader(cls, c);
  RandomColorOptions o;
  o.factor = factor_from_json(r.value("factor"), cls, "factor");
  if (c.contains("value_range")) o.value_range = r.reals("value_range");
  o.seed = seed_from_config(c);
  o.name = r.string("name");
  return o;
}
}  // namespace

RandomColorLayer::RandomColorLayer(RandomColorOptions options, std::pair<float, float> factor, std::uint64_t tag)
    : Layer(options.name), options_(std::move(options)), lower_(factor.first), upper_(factor.second), tag_(tag) {}

Shape RandomColorLayer::compute_output_shape(const Shape& s) const {
  check_images(*this, s);
  return s;
}

void RandomColorLayer::build_impl(const Shape& s, std::uint64_t seed) {
  check_images(*this, s);
  stream_ = layer_stream(tag_, options_.seed, seed);
}

Tensor RandomColorLayer::call(const Tensor& x_in, const CallContext& ctx) const {
  check_images(*this, x_in.shape());
  const Tensor x = autocast(x_in);  // Keras' transform_images casts to the compute dtype in both modes
  if (!ctx.training || x.numel() == 0) return x;
  const auto [lo, hi] = draw_range();
  return transform(x, per_image_uniform(x, lo, hi, random_key(ctx, stream_, options_.seed)));
}

json RandomColorLayer::get_config() const { return color_config(Layer::get_config(), options_, lower_, upper_); }

// Keras' RandomContrast._FACTOR_BOUNDS = (0, 1): a number f is (0, f), factors in [1, 1 + f].
RandomContrastLayer::RandomContrastLayer(RandomColorOptions options)
    : RandomColorLayer(options, keras_factor("RandomContrast", options.factor, 0.0f, 1.0f), 0x52616e64436f6e74ULL) {
  const std::vector<float>& range = this->options().value_range;
  check_value_range("RandomContrast", range);
  // Keras keeps the range as given and clips to it, a reversed one making every pixel its first
  // value: refused here.
  LOCKSTEP_CHECK(range[0] <= range[1], "RandomContrast: value_range ", floats_str(range), " must be (low, high)");
}

std::pair<float, float> RandomContrastLayer::draw_range() const { return {1.0f - lower(), 1.0f + upper()}; }

Tensor RandomContrastLayer::transform(const Tensor& x, const Tensor& factor) const {
  // Keras' _adjust_contrast: the mean over height, then over width, per image and channel.
  const Tensor m = mean(mean(x, 1, true), 2, true);
  return clip(add(mul(sub(x, m), factor), m), options().value_range[0], options().value_range[1]);
}

LayerPtr RandomContrastLayer::from_config(const json& c) {
  return std::make_shared<RandomContrastLayer>(color_options(c, "RandomContrast"));
}

// Keras' default _FACTOR_BOUNDS = (-1, 1): a number f is (-f, f); value_range sorted as Keras'
// _set_value_range.
RandomBrightnessLayer::RandomBrightnessLayer(RandomColorOptions options)
    : RandomColorLayer(sorted_range("RandomBrightness", options),
                       keras_factor("RandomBrightness", options.factor, -1.0f, 1.0f), 0x52616e6442726974ULL) {}

std::pair<float, float> RandomBrightnessLayer::draw_range() const { return {lower(), upper()}; }

Tensor RandomBrightnessLayer::transform(const Tensor& x, const Tensor& delta) const {
  const float low = options().value_range[0], high = options().value_range[1];
  // Keras: rgb_delta = uniform(lower, upper) * (high - low), images + rgb_delta, clipped.
  return clip(add(x, scale(delta, high - low)), low, high);
}

LayerPtr RandomBrightnessLayer::from_config(const json& c) {
  return std::make_shared<RandomBrightnessLayer>(color_options(c, "RandomBrightness"));
}

LayerPtr Normalization(NormalizationOptions options) {
  return std::make_shared<NormalizationLayer>(std::move(options));
}
LayerPtr RandomFlip(const std::string& mode, std::optional<std::int64_t> seed) {
  return std::make_shared<RandomFlipLayer>(RandomFlipOptions{.mode = mode, .seed = seed});
}
LayerPtr RandomContrast(std::vector<float> factor, std::vector<float> value_range, std::optional<std::int64_t> seed) {
  return std::make_shared<RandomContrastLayer>(
      RandomColorOptions{.factor = std::move(factor), .value_range = std::move(value_range), .seed = seed});
}
LayerPtr RandomBrightness(std::vector<float> factor, std::vector<float> value_range,
                          std::optional<std::int64_t> seed) {
  return std::make_shared<RandomBrightnessLayer>(
      RandomColorOptions{.factor = std::move(factor), .value_range = std::move(value_range), .seed = seed});
}

}  // namespace lockstep::layers
