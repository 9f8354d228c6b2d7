// Keras 3's LSTM (keras/src/layers/rnn/lstm.py): gates i, f, c, o; states [h, c].
#include <nlohmann/json.hpp>

#include "lockstep/layers/recurrent_layers.hpp"
#include "lockstep/tensor/ops_recurrent.hpp"
#include "lockstep/tensor/ops_rows.hpp"

namespace lockstep::layers {

LSTMLayer::LSTMLayer(const RecurrentOptions& options) : RecurrentLayer(options, "LSTM", 4, 2) {}

std::vector<Tensor> LSTMLayer::step(const StepInputs& in, const std::vector<Tensor>& states) const {
  if (recurrent_activation() == ActivationKind::kSigmoid && activation() == ActivationKind::kTanh) {
    // Keras' activations: one op (the same bits as the composition below), h and c its two halves
    // (views: no copy).
    const std::int64_t batch = states[1].dim(0);
    const Tensor hc = reshape(lstm_cell(in.projected, in.recurrent, states[1]), {2 * batch, options().units});
    return {slice_rows(hc, 0, batch), slice_rows(hc, batch, 2 * batch)};
  }
  const Tensor z = add(in.projected, in.recurrent);
  const Tensor i = apply_activation(recurrent_activation(), gate(z, 0));
  const Tensor f = apply_activation(recurrent_activation(), gate(z, 1));
  const Tensor c = add(mul(f, states[1]), mul(i, apply_activation(activation(), gate(z, 2))));
  const Tensor o = apply_activation(recurrent_activation(), gate(z, 3));
  return {mul(o, apply_activation(activation(), c)), c};
}

// unit_forget_bias: the bias initializer's values but ones for the forget gate (Keras'
// concatenation of bias_initializer((units,)), ones((units,)), bias_initializer((2 * units,))).
Tensor LSTMLayer::initial_bias(std::uint64_t seed) const {
  if (!options().unit_forget_bias) return RecurrentLayer::initial_bias(seed);
  const std::int64_t u = options().units;
  const Initializer init{options().bias_initializer};
  return concat({init(Shape{u}, mix_seed(seed, 1)), Tensor::ones(Shape{u}), init(Shape{2 * u}, mix_seed(seed, 2))});
}

nlohmann::json LSTMLayer::get_config() const {
  nlohmann::json c = RecurrentLayer::get_config();
  c["recurrent_activation"] = activation_name(recurrent_activation());
  c["unit_forget_bias"] = options().unit_forget_bias;
  return c;
}

LayerPtr LSTMLayer::from_config(const nlohmann::json& config) {
  return std::make_shared<LSTMLayer>(options_from_config(config, "LSTM"));
}

LayerPtr LSTM(std::int64_t units, bool return_sequences) {
  return LSTM(RecurrentOptions{.units = units, .return_sequences = return_sequences});
}
LayerPtr LSTM(const RecurrentOptions& options) { return std::make_shared<LSTMLayer>(options); }

}  // namespace lockstep::layers
