#include "lockstep/layers/layer_normalization.hpp"

#include <memory>
#include <nlohmann/json.hpp>

#include "lockstep/layers/layer_registry.hpp"
#include "nn/normalization_common.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::layers {

namespace {
// The gradient of y = xhat * gamma + beta over rows of x (rows, features), xhat = (x - mean) *
// inv_std with each row's statistics: the input's in one fused pass over each row
// (layer_norm_input_grad), gamma's and beta's the column sums of dy * xhat and dy.
class LayerNormGradient final : public CustomGradient {
 public:
  LayerNormGradient(Tensor mean, Tensor inv_std) : mean_(std::move(mean)), inv_std_(std::move(inv_std)) {}
  const char* name() const override { return "layer_normalization"; }
  std::array<Tensor, 3> backward(const OpRecord& r, const Tensor& g16, const std::array<bool, 3>& needs) const override {
    // x as float32 rows again (the tape keeps a 16-bit x, not its float32 copy).
    const Tensor& in = r.inputs[0];
    const Tensor x = detail::wide(in).reshape({mean_.numel(), in.dim(-1)});
    const Tensor g = detail::wide(g16).reshape(x.shape());
    std::array<Tensor, 3> out;
    if (needs[0]) {
      const Tensor gamma = r.inputs[1].defined() ? detail::wide(r.inputs[1]) : Tensor();
      out[0] = layer_norm_input_grad(g, x, gamma, mean_, inv_std_).reshape(in.shape());
      if (in.dtype() != DType::kF32) out[0] = out[0].to(in.dtype());
    }
    const std::int64_t rows = x.dim(0);
    if (needs[1]) out[1] = sum(mul(g, mul(sub(x, mean_.reshape({rows, 1})), inv_std_.reshape({rows, 1}))), 0);
    if (needs[2]) out[2] = sum(g, 0);
    for (int i : {1, 2})  // in the variables' dtype (float32 but under a pure 16-bit policy)
      if (out[i].defined() && out[i].dtype() != r.inputs[i].dtype()) out[i] = out[i].to(r.inputs[i].dtype());
    return out;
  }

 private:
  Tensor mean_, inv_std_;  // each row's, (rows,)
};
}  // namespace

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
  // As Keras 3: a 16-bit input's statistics are computed in float32, the output cast back. One
  // fused pass over each row (layer_norm), its gradient recorded as one op.
  const Tensor in = autocast(x);
  const Tensor gamma = gamma_.defined() ? gamma_.value() : Tensor();
  const Tensor beta = beta_.defined() ? beta_.value() : Tensor();
  const std::int64_t features = x.dim(-1);
  Tensor y, mean, inv_std;
  {
    const detail::RecordingPaused paused;
    const Tensor rows = detail::wide(in).reshape({in.numel() / features, features});
    const auto normalised = layer_norm(rows, gamma.defined() ? detail::wide(gamma) : gamma,
                                       beta.defined() ? detail::wide(beta) : beta, options_.epsilon);
    y = normalised[0];
    mean = normalised[1];
    inv_std = normalised[2];
    y = y.reshape(in.shape());
    if (in.dtype() != DType::kF32) y = y.to(in.dtype());
  }
  record_custom({in, gamma, beta}, y, std::make_shared<LayerNormGradient>(mean, inv_std));
  return y;
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
  auto r = layer_config_reader("LayerNormalization", c);
  return std::make_shared<LayerNormalizationLayer>(detail::read_affine_options(r, o));
}

LayerPtr LayerNormalization(const LayerNormalizationOptions& options) {
  return std::make_shared<LayerNormalizationLayer>(options);
}

}  // namespace lockstep::layers
