#include "lockstep/layers/activation_layers.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "lockstep/layers/activations.hpp"
#include "lockstep/layers/initializers.hpp"
#include "lockstep/tensor/ops.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

using nlohmann::json;

namespace {
// Keras' checks of the ReLU and LeakyReLU arguments (keras/src/layers/activations/relu.py).
void check_not_negative(const char* cls, const char* what, float v) {
  if (!(v >= 0.0f)) throw ValueError(detail::concat(cls, ": ", what, " cannot be negative (or NaN), got ", v));
}
}  // namespace

// ---- ReLU ----
ReLULayer::ReLULayer(std::optional<float> max_value, float negative_slope, float threshold, std::string name)
    : Layer(std::move(name)), max_value_(max_value), negative_slope_(negative_slope), threshold_(threshold) {
  if (max_value) check_not_negative("ReLU", "max_value", *max_value);
  check_not_negative("ReLU", "negative_slope", negative_slope);
  check_not_negative("ReLU", "threshold", threshold);
}

Tensor ReLULayer::call(const Tensor& x, const CallContext&) const {
  const Tensor in = autocast(x);
  // The plain case is the relu op itself (its own kernel and gradient).
  if (!max_value_ && negative_slope_ == 0.0f && threshold_ == 0.0f) return relu(in);
  return keras_relu(in, negative_slope_, max_value_, threshold_);
}

json ReLULayer::get_config() const {
  json c = Layer::get_config();
  c.update({{"max_value", max_value_ ? json(*max_value_) : json(nullptr)},
            {"negative_slope", negative_slope_},
            {"threshold", threshold_}});
  return c;
}
LayerPtr ReLULayer::from_config(const json& c) {
  auto r = layer_config_reader("ReLU", c);
  const std::optional<float> max_value = r.raw("max_value") ? std::optional<float>(r.real("max_value")) : std::nullopt;
  return std::make_shared<ReLULayer>(max_value, r.real("negative_slope", 0.0f), r.real("threshold", 0.0f),
                                     r.string("name"));
}

// ---- LeakyReLU ----
LeakyReLULayer::LeakyReLULayer(float negative_slope, std::string name)
    : Layer(std::move(name)), negative_slope_(negative_slope) {
  check_not_negative("LeakyReLU", "negative_slope", negative_slope);
}

Tensor LeakyReLULayer::call(const Tensor& x, const CallContext&) const {
  return leaky_relu(autocast(x), negative_slope_);
}

json LeakyReLULayer::get_config() const {
  json c = Layer::get_config();
  c["negative_slope"] = negative_slope_;
  return c;
}
LayerPtr LeakyReLULayer::from_config(const json& c) {
  auto r = layer_config_reader("LeakyReLU", c);
  return std::make_shared<LeakyReLULayer>(r.real("negative_slope", 0.3f), r.string("name"));
}

// ---- ELU ----
ELULayer::ELULayer(float alpha, std::string name) : Layer(std::move(name)), alpha_(alpha) {
  if (!std::isfinite(alpha)) throw ValueError(detail::concat("ELU: alpha must be finite, got ", alpha));
}

Tensor ELULayer::call(const Tensor& x, const CallContext&) const { return elu(autocast(x), alpha_); }

json ELULayer::get_config() const {
  json c = Layer::get_config();
  c["alpha"] = alpha_;
  return c;
}
LayerPtr ELULayer::from_config(const json& c) {
  auto r = layer_config_reader("ELU", c);
  return std::make_shared<ELULayer>(r.real("alpha", 1.0f), r.string("name"));
}

// ---- PReLU ----
PReLULayer::PReLULayer(std::string alpha_initializer, std::vector<int> shared_axes, std::string name)
    : Layer(std::move(name)), alpha_initializer_(std::move(alpha_initializer)), shared_axes_(std::move(shared_axes)) {
  (void)Initializer{alpha_initializer_}(Shape{0}, 0);
  for (int a : shared_axes_)
    if (a < 1) throw ValueError(detail::concat("PReLU: shared_axes are the axes after the batch (1, 2, ...), got ", a));
}

void PReLULayer::build_impl(const Shape& s, std::uint64_t seed) {
  // Keras' PReLU.build: alpha has the input's shape after the batch, 1 along each shared axis.
  std::vector<std::int64_t> dims(s.dims().begin() + 1, s.dims().end());
  for (int a : shared_axes_) {
    LOCKSTEP_CHECK(static_cast<std::size_t>(a) <= dims.size(), "layer '", name(), "' (PReLU): shared axis ", a,
                   " is not an axis of the input ", s.str());
    dims[static_cast<std::size_t>(a - 1)] = 1;
  }
  for (std::int64_t d : dims)
    LOCKSTEP_CHECK(d > 0, "layer '", name(), "' (PReLU): the input ", s.str(),
                   " has an unknown axis that is not shared (alpha needs its size)");
  alpha_ = add_weight("alpha", Shape(std::move(dims)), Initializer{alpha_initializer_}, mix_seed(seed, 1));
}

Tensor PReLULayer::call(const Tensor& x, const CallContext&) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (PReLU) is called before it was built");
  const Tensor in = autocast(x);
  // Keras' PReLU.call: relu(x) - alpha * relu(-x), alpha broadcast over the batch and shared axes.
  return sub(relu(in), mul(autocast(alpha_.value()), relu(neg(in))));
}

json PReLULayer::get_config() const {
  json c = Layer::get_config();
  c["alpha_initializer"] = alpha_initializer_;
  c["shared_axes"] = shared_axes_.empty() ? json(nullptr) : json(shared_axes_);
  return c;
}
LayerPtr PReLULayer::from_config(const json& c) {
  // Keras takes one axis or a list of them (and writes the list).
  auto r = layer_config_reader("PReLU", c);
  constexpr std::int64_t kAxis = 1 << 20;  // past any rank: the layer checks the axes
  std::vector<int> axes;
  if (const json* a = r.raw("shared_axes"); a && a->is_array()) {
    for (std::int64_t axis : r.integers("shared_axes", -kAxis, kAxis)) axes.push_back(static_cast<int>(axis));
  } else if (a) {
    axes.push_back(static_cast<int>(r.integer_in("shared_axes", -kAxis, kAxis)));
  }
  return std::make_shared<PReLULayer>(r.string("alpha_initializer", "zeros"), std::move(axes), r.string("name"));
}

LayerPtr ReLU(std::optional<float> max_value, float negative_slope, float threshold) {
  return std::make_shared<ReLULayer>(max_value, negative_slope, threshold);
}
LayerPtr LeakyReLU(float negative_slope) { return std::make_shared<LeakyReLULayer>(negative_slope); }
LayerPtr ELU(float alpha) { return std::make_shared<ELULayer>(alpha); }
LayerPtr PReLU(const std::string& alpha_initializer, std::vector<int> shared_axes) {
  return std::make_shared<PReLULayer>(alpha_initializer, std::move(shared_axes));
}

}  // namespace lockstep::layers
