#include "lockstep/layers/regularization_layers.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/layers/core_layers.hpp"  // DropoutLayer
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/tensor/ops_random.hpp"
#include "nn/random_draws.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
using nlohmann::json;


void check_rate(const char* cls, float rate) {
  LOCKSTEP_CHECK(rate >= 0.0f && rate < 1.0f, cls, ": rate must be in [0, 1), got ", rate,
                 " (Keras takes 1, which drops every unit; lockstep refuses it as its Dropout does)");
}

// Each class's stream tag for a layer's own seed (layer_stream): its name's first bytes.
constexpr std::uint64_t kDropoutTag = 0x44726f706f757400ULL;         // "Dropout"
constexpr std::uint64_t kSpatialDropoutTag = 0x5370617469616c44ULL;  // "SpatialD"
constexpr std::uint64_t kGaussianNoiseTag = 0x476175734e6f6973ULL;   // "GausNois"
constexpr std::uint64_t kGaussianDropoutTag = 0x4761757344726f70ULL; // "GausDrop"
constexpr std::uint64_t kAlphaDropoutTag = 0x416c706861447270ULL;    // "AlphaDrp"

}  // namespace

// ---- What they share (RandomRegularizationLayer) ----

json RandomRegularizationLayer::get_config() const {
  json c = Layer::get_config();
  c[key_] = amount_;
  c["seed"] = seed_to_json(seed_);
  return c;
}

void RandomRegularizationLayer::build_impl(const Shape& s, std::uint64_t seed) {
  (void)compute_output_shape(s);
  stream_ = layer_stream(tag_, seed_, seed);
}

// ---- noise_shape (Dropout's and AlphaDropout's) ----

NoiseShape::NoiseShape(std::vector<std::int64_t> dims, const char* cls) : dims_(std::move(dims)) {
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    const std::int64_t d = dims_[i];
    LOCKSTEP_CHECK(d == -1 || d > 0, cls, ": invalid value received for argument `noise_shape`: expected all "
                   "dimensions to be positive integers or None, entry ", i, " is ", d);
  }
  LOCKSTEP_CHECK(dims_.empty() || dims_[0] == -1, cls, ": noise_shape's batch entry must be None in lockstep "
                 "(each example draws its own mask, keyed by its index in the global batch), got ", dims_[0]);
}

void NoiseShape::check(const Layer& layer, const Shape& s) const {
  if (dims_.empty()) return;
  LOCKSTEP_CHECK(dims_.size() == s.rank(), "layer '", layer.name(), "' (", layer.class_name(), "): noise_shape has ",
                 dims_.size(), " entries but its inputs ", s.str(), " have ", s.rank(), " axes");
  for (std::size_t i = 1; i < s.rank(); ++i) {
    const std::int64_t d = dims_[i], n = s.dims()[i];
    LOCKSTEP_CHECK(d == -1 || d == 1 || n < 0 || d == n, "layer '", layer.name(), "' (", layer.class_name(),
                   "): noise_shape entry ", i, " (", d, ") does not broadcast against the input's size ", n,
                   " of inputs ", s.str());
  }
}

Shape NoiseShape::concrete(const Shape& s) const {
  std::vector<std::int64_t> noise = s.dims();
  for (std::size_t i = 1; i < dims_.size(); ++i)
    if (dims_[i] != -1) noise[i] = dims_[i];
  return Shape(std::move(noise));
}

json NoiseShape::to_json() const { return dims_.empty() ? json(nullptr) : shape_to_json(Shape(dims_)); }

std::vector<std::int64_t> NoiseShape::from_config(const json& c) {
  auto r = layer_config_reader("noise_shape", c);
  if (!r.raw("noise_shape")) return {};
  const json& noise = r.value("noise_shape");
  // Keras: "Expected all elements to be integers or None" (a float would be truncated).
  LOCKSTEP_CHECK(noise.is_array(), "invalid value received for argument `noise_shape`: expected a list of integers "
                 "or None, got ", noise.dump().substr(0, 200));
  for (std::size_t i = 0; i < noise.size(); ++i)
    LOCKSTEP_CHECK(noise[i].is_null() || noise[i].is_number_integer(), "invalid value received for argument "
                   "`noise_shape`: expected all elements to be integers or None, entry ", i, " is ",
                   noise[i].dump().substr(0, 200));
  return r.dimensions("noise_shape");
}

namespace {
// The kept-unit mask of a noise shape `noise` (batch first): one draw per (example, unit of the
// noise), dropout's, in the noise's shape.
Tensor noise_mask(const Shape& noise, DType dtype, float rate, const DropoutKey& key) {
  const std::int64_t rows = noise[0];
  const std::int64_t units = rows == 0 ? 0 : noise.numel() / rows;
  return kept_units(rows, units, dtype, rate, key).reshape(noise);
}
}  // namespace

Tensor RandomRegularizationLayer::call(const Tensor& x, const CallContext& ctx) const {
  (void)compute_output_shape(x.shape());
  const Tensor in = autocast(x);
  // Keras: `if training and self.rate > 0:` the layer's draws, else `return inputs`.
  if (!ctx.training || amount_ == 0.0f) return in;
  return transform(in, random_key(ctx, stream_, seed_));
}

// ---- Dropout (dropout.py) ----

DropoutLayer::DropoutLayer(float rate, std::vector<std::int64_t> noise_shape, std::optional<std::int64_t> seed,
                           std::string name)
    : RandomRegularizationLayer("rate", rate, kDropoutTag, seed, std::move(name)),
      noise_shape_(std::move(noise_shape), "Dropout") {
  LOCKSTEP_CHECK(rate >= 0.0f && rate < 1.0f, "Dropout: rate must be in [0, 1), got ", rate);
}

Shape DropoutLayer::compute_output_shape(const Shape& s) const {
  noise_shape_.check(*this, s);
  return s;
}

Tensor DropoutLayer::transform(const Tensor& x, const DropoutKey& key) const {
  if (noise_shape_.empty()) return dropout(x, rate(), key);
  // Keras: the mask of the noise shape, broadcast over the inputs.
  return mul(x, noise_mask(noise_shape_.concrete(x.shape()), x.dtype(), rate(), key));
}

json DropoutLayer::get_config() const {
  json c = RandomRegularizationLayer::get_config();
  c["noise_shape"] = noise_shape_.to_json();
  return c;
}

LayerPtr DropoutLayer::from_config(const json& c) {
  auto r = layer_config_reader("Dropout", c);
  return std::make_shared<DropoutLayer>(r.real("rate"), NoiseShape::from_config(c), seed_from_config(c), r.string("name"));
}

// ---- SpatialDropout1D / 2D / 3D (keras/src/layers/regularization/spatial_dropout.py) ----

SpatialDropoutLayer::SpatialDropoutLayer(int rank, float rate, std::string data_format,
                                         std::optional<std::int64_t> seed, std::string name)
    : RandomRegularizationLayer("rate", rate, kSpatialDropoutTag, seed, std::move(name)),
      rank_(rank),
      data_format_(std::move(data_format)) {
  LOCKSTEP_CHECK(rank >= 1 && rank <= 3, "SpatialDropout: rank ", rank, " is not 1, 2 or 3");
  check_rate(class_name().c_str(), rate);
  LOCKSTEP_CHECK(data_format_ == "channels_last" || (rank > 1 && data_format_ == "channels_first"),
                 class_name(), ": data_format must be \"channels_last\"",
                 rank > 1 ? " or \"channels_first\"" : " (SpatialDropout1D has no other)", ", got \"", data_format_,
                 "\"");
}

Shape SpatialDropoutLayer::compute_output_shape(const Shape& s) const {
  // Keras' InputSpec(ndim=3) / (ndim=4) / (ndim=5).
  LOCKSTEP_CHECK(static_cast<int>(s.rank()) == rank_ + 2, "Input 0 of layer \"", name(), "\" (", class_name(),
                 ") is incompatible with the layer: expected ndim=", rank_ + 2, ", found ndim=", s.rank(),
                 ". Full shape received: ", s.str());
  return s;
}

Tensor SpatialDropoutLayer::transform(const Tensor& in, const DropoutKey& key) const {
  // Keras' noise_shape: (batch, 1, channels); (batch, 1, 1, channels) or (batch, channels, 1, 1);
  // (batch, 1, 1, 1, channels) or (batch, channels, 1, 1, 1).
  const bool first = data_format_ == "channels_first";
  const std::int64_t channels = first ? in.dim(1) : in.dim(-1);
  std::vector<std::int64_t> noise(in.rank(), 1);
  noise[0] = in.dim(0);
  noise[first ? 1 : in.rank() - 1] = channels;
  const Tensor mask = kept_units(in.dim(0), channels, in.dtype(), rate(), key).reshape(Shape(std::move(noise)));
  return mul(in, mask);
}

json SpatialDropoutLayer::get_config() const {
  json c = RandomRegularizationLayer::get_config();
  if (rank_ > 1) c["data_format"] = data_format_;
  return c;
}

LayerPtr SpatialDropoutLayer::from_config(int rank, const json& c) {
  auto r = layer_config_reader("SpatialDropout" + std::to_string(rank) + "D", c);
  std::string format = "channels_last";  // Keras' None: its image_data_format, channels_last unless set
  if (rank > 1 && r.raw("data_format")) format = r.string("data_format");
  return std::make_shared<SpatialDropoutLayer>(rank, r.real("rate"), format, seed_from_config(c), r.string("name"));
}

// ---- GaussianNoise, GaussianDropout (gaussian_noise.py, gaussian_dropout.py) ----

GaussianNoiseLayer::GaussianNoiseLayer(float stddev, std::optional<std::int64_t> seed, std::string name)
    : RandomRegularizationLayer("stddev", stddev, kGaussianNoiseTag, seed, std::move(name)) {
  LOCKSTEP_CHECK(stddev >= 0.0f && stddev <= 1.0f,
                 "Invalid value received for argument `stddev`. Expected a float value between 0 and 1. Received: "
                 "stddev=",
                 stddev);
}

Tensor GaussianNoiseLayer::transform(const Tensor& in, const DropoutKey& key) const {
  // inputs + normal(shape, mean=0, stddev)
  return add(in, scale(standard_normal_like(in, key), stddev()));
}

LayerPtr GaussianNoiseLayer::from_config(const json& c) {
  auto r = layer_config_reader("GaussianNoise", c);
  return std::make_shared<GaussianNoiseLayer>(r.real("stddev"), seed_from_config(c), r.string("name"));
}

GaussianDropoutLayer::GaussianDropoutLayer(float rate, std::optional<std::int64_t> seed, std::string name)
    : RandomRegularizationLayer("rate", rate, kGaussianDropoutTag, seed, std::move(name)) {
  LOCKSTEP_CHECK(rate >= 0.0f && rate < 1.0f, "GaussianDropout: rate must be in [0, 1), got ", rate,
                 " (at 1 Keras' noise, of deviation sqrt(rate / (1 - rate)), is infinite)");
}

Tensor GaussianDropoutLayer::transform(const Tensor& in, const DropoutKey& key) const {
  // inputs * normal(shape, mean=1, stddev=sqrt(rate / (1 - rate)))
  const double r = rate();
  const float stddev = static_cast<float>(std::sqrt(r / (1.0 - r)));
  return mul(in, add_scalar(scale(standard_normal_like(in, key), stddev), 1.0f));
}

LayerPtr GaussianDropoutLayer::from_config(const json& c) {
  auto r = layer_config_reader("GaussianDropout", c);
  return std::make_shared<GaussianDropoutLayer>(r.real("rate"), seed_from_config(c), r.string("name"));
}

// ---- AlphaDropout (alpha_dropout.py) ----

AlphaDropoutLayer::AlphaDropoutLayer(float rate, std::vector<std::int64_t> noise_shape,
                                     std::optional<std::int64_t> seed, std::string name)
    : RandomRegularizationLayer("rate", rate, kAlphaDropoutTag, seed, std::move(name)),
      noise_shape_(std::move(noise_shape), "AlphaDropout") {
  check_rate("AlphaDropout", rate);
}

Shape AlphaDropoutLayer::compute_output_shape(const Shape& s) const {
  noise_shape_.check(*this, s);
  return s;
}

Tensor AlphaDropoutLayer::transform(const Tensor& in, const DropoutKey& key) const {
  // The mask of Keras' concrete noise shape (None: the input's size).
  const Tensor mask = noise_mask(noise_shape_.concrete(in.shape()), in.dtype(), rate(), key);
  const Tensor kept = not_equal(mask, Tensor::zeros(Shape{}, mask.dtype()));
  // Keras: x = inputs * kept + alpha_p * (1 - kept); a * x + b, with alpha_p = -alpha * scale of SELU.
  const double alpha = 1.6732632423543772848170429916717, selu_scale = 1.0507009873554804934193349852946;
  const double alpha_p = -alpha * selu_scale, rate = this->rate();
  const double a = std::pow((1.0 - rate) * (1.0 + rate * alpha_p * alpha_p), -0.5);
  const double b = -a * alpha_p * rate;
  const Tensor kept_value = add_scalar(scale(in, static_cast<float>(a)), static_cast<float>(b));
  return where(kept, kept_value, Tensor::full(Shape{}, a * alpha_p + b, in.dtype()));
}

json AlphaDropoutLayer::get_config() const {
  json c = RandomRegularizationLayer::get_config();
  c["noise_shape"] = noise_shape_.to_json();
  return c;
}

LayerPtr AlphaDropoutLayer::from_config(const json& c) {
  auto r = layer_config_reader("AlphaDropout", c);
  return std::make_shared<AlphaDropoutLayer>(r.real("rate"), NoiseShape::from_config(c), seed_from_config(c),
                                             r.string("name"));
}

// ---- Identity (keras/src/layers/core/identity.py) ----

LayerPtr IdentityLayer::from_config(const json& c) {
  return std::make_shared<IdentityLayer>(layer_config_reader("Identity", c).string("name"));
}

LayerPtr SpatialDropout1D(float rate, std::optional<std::int64_t> seed) {
  return std::make_shared<SpatialDropoutLayer>(1, rate, "channels_last", seed);
}
LayerPtr SpatialDropout2D(float rate, const std::string& data_format, std::optional<std::int64_t> seed) {
  return std::make_shared<SpatialDropoutLayer>(2, rate, data_format, seed);
}
LayerPtr SpatialDropout3D(float rate, const std::string& data_format, std::optional<std::int64_t> seed) {
  return std::make_shared<SpatialDropoutLayer>(3, rate, data_format, seed);
}
LayerPtr GaussianNoise(float stddev, std::optional<std::int64_t> seed) {
  return std::make_shared<GaussianNoiseLayer>(stddev, seed);
}
LayerPtr GaussianDropout(float rate, std::optional<std::int64_t> seed) {
  return std::make_shared<GaussianDropoutLayer>(rate, seed);
}
LayerPtr AlphaDropout(float rate, std::vector<std::int64_t> noise_shape, std::optional<std::int64_t> seed) {
  return std::make_shared<AlphaDropoutLayer>(rate, std::move(noise_shape), seed);
}
LayerPtr Identity() { return std::make_shared<IdentityLayer>(); }

}  // namespace lockstep::layers
