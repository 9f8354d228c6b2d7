#include "lockstep/layers/layer_normalization.hpp"

#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"

namespace lockstep::layers {

LayerNormalizationLayer::LayerNormalizationLayer(const LayerNormalizationOptions& o) : Layer(o.name), options_(o) {
  LOCKSTEP_CHECK(o.epsilon > 0.0f, "LayerNormalization: epsilon must be positive, got ", o.epsilon);
  // Validate initializer names now rather than at build time.
  for (const auto* init : {&o.beta_initializer, &o.gamma_initializer}) (void)Initializer{*init}(Shape{0}, 0);
}

void LayerNormalizationLayer::build_impl(const Shape& s, std::uint64_t seed) {
  LOCKSTEP_CHECK(s.rank() >= 2 && s.dims().back() > 0, "layer '", name(),
                 "' (LayerNormalization) needs inputs of shape (batch, ..., features), got ", s.str());
  const Shape features{s.dims().back()};
  // Keras' order (and so its weight file's): gamma, then beta.
  if (options_.scale) gamma_ = add_weight("gamma", features, Initializer{options_.gamma_initializer}, mix_seed(seed, 1));
  if (options_.center) beta_ = add_weight("beta", features, Initializer{options_.beta_initializer}, mix_seed(seed, 2));
}

Tensor LayerNormalizationLayer::call(const Tensor& x, const CallContext&) const {
  LOCKSTEP_CHECK(built(), "layer '", name(), "' (LayerNormalization) is called before it was built");
  LOCKSTEP_CHECK(x.rank() == input_shape().rank() && x.dim(-1) == input_shape().dims().back(), "layer '", name(),
                 "' (LayerNormalization) was built for inputs ", input_shape().str(), " but receives ",
                 x.shape().str());
  // As Keras 3: a 16-bit input's statistics are computed in float32, the output cast back.
  const Tensor in = autocast(x);
  const Tensor xf = in.dtype() == DType::kF32 ? in : cast(in, DType::kF32);
  const int axis = static_cast<int>(x.rank()) - 1;
  const Tensor centered = sub(xf, mean(xf, axis, true));
  const Tensor variance = mean(square(centered), axis, true);
  Tensor y = mul(centered, pow_scalar(add_scalar(variance, options_.epsilon), -0.5f));
  if (gamma_.defined()) y = mul(y, gamma_.value());
  if (beta_.defined()) y = add(y, beta_.value());
  return in.dtype() == DType::kF32 ? y : cast(y, in.dtype());
}

nlohmann::json LayerNormalizationLayer::get_config() const {
  nlohmann::json c = Layer::get_config();
  const auto& o = options_;
  c.update({{"axis", -1}, {"epsilon", o.epsilon}, {"center", o.center}, {"scale", o.scale},
            {"beta_initializer", o.beta_initializer}, {"gamma_initializer", o.gamma_initializer}});
  return c;
}

LayerPtr LayerNormalizationLayer::from_config(const nlohmann::json& c) {
  check_last_axis(c, "LayerNormalization");
  LayerNormalizationOptions o;
  o.epsilon = c.value("epsilon", o.epsilon);
  o.center = c.value("center", o.center);
  o.scale = c.value("scale", o.scale);
  o.beta_initializer = c.value("beta_initializer", o.beta_initializer);
  o.gamma_initializer = c.value("gamma_initializer", o.gamma_initializer);
  o.name = c.at("name").get<std::string>();
  return std::make_shared<LayerNormalizationLayer>(o);
}

LayerPtr LayerNormalization(const LayerNormalizationOptions& options) {
  return std::make_shared<LayerNormalizationLayer>(options);
}

}  // namespace lockstep::layers
