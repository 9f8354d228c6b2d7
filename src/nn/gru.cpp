// Keras 3's GRU (keras/src/layers/rnn/gru.py): gates z, r, h; one state.
#include <nlohmann/json.hpp>

#include "lockstep/layers/recurrent_layers.hpp"
#include "lockstep/tensor/ops_recurrent.hpp"
#include "lockstep/tensor/ops_rows.hpp"

namespace lockstep::layers {

GRULayer::GRULayer(const RecurrentOptions& options) : RecurrentLayer(options, "GRU", 3, 1) {}

Shape GRULayer::bias_shape() const {
  const std::int64_t u3 = 3 * options().units;
  return options().reset_after ? Shape{2, u3} : Shape{u3};
}

// reset_after: the bias' rows are the input bias and the recurrent bias.
Tensor GRULayer::input_bias(const Tensor& bias) const {
  if (!options().reset_after) return bias;
  return reshape(slice_rows(bias, 0, 1), {bias.dim(1)});
}

Tensor GRULayer::recurrent_bias(const Tensor& bias) const {
  if (!options().reset_after) return Tensor();
  return reshape(slice_rows(bias, 1, 2), {bias.dim(1)});
}

std::vector<Tensor> GRULayer::step(const StepInputs& in, const std::vector<Tensor>& states) const {
  const Tensor& h = states[0];
  Tensor inner = in.recurrent;
  if (in.recurrent_bias.defined()) inner = add(inner, in.recurrent_bias);
  if (options().reset_after && recurrent_activation() == ActivationKind::kSigmoid &&
      activation() == ActivationKind::kTanh)
    return {gru_cell(in.projected, inner, h)};  // Keras' defaults: one op, the same bits as below
  const Tensor z = apply_activation(recurrent_activation(), add(gate(in.projected, 0), gate(inner, 0)));
  const Tensor r = apply_activation(recurrent_activation(), add(gate(in.projected, 1), gate(inner, 1)));
  // reset_after=False: (r * h) · R_h, h through the h gate's recurrent dropout mask where there is one.
  Tensor recurrent_h;
  if (options().reset_after) {
    recurrent_h = mul(r, gate(inner, 2));
  } else if (in.masked_states.empty()) {
    recurrent_h = matmul(mul(r, h), gate(in.recurrent_kernel, 2));
  } else {
    recurrent_h = matmul(mul(r, in.masked_states[2]), in.kernel_gates[2]);
  }
  const Tensor hh = apply_activation(activation(), add(gate(in.projected, 2), recurrent_h));
  return {add(mul(z, h), mul(add_scalar(neg(z), 1.0f), hh))};
}

nlohmann::json GRULayer::get_config() const {
  nlohmann::json c = RecurrentLayer::get_config();
  c["recurrent_activation"] = activation_name(recurrent_activation());
  c["reset_after"] = options().reset_after;
  return c;
}

LayerPtr GRULayer::from_config(const nlohmann::json& config) {
  return std::make_shared<GRULayer>(options_from_config(config, "GRU"));
}

LayerPtr GRU(std::int64_t units, bool return_sequences) {
  return GRU(RecurrentOptions{.units = units, .return_sequences = return_sequences});
}
LayerPtr GRU(const RecurrentOptions& options) { return std::make_shared<GRULayer>(options); }

}  // namespace lockstep::layers
