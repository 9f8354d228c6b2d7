// Keras 3's SimpleRNN (keras/src/layers/rnn/simple_rnn.py): one gate.
#include <nlohmann/json.hpp>

#include "lockstep/layers/recurrent_layers.hpp"

namespace lockstep::layers {

SimpleRNNLayer::SimpleRNNLayer(const RecurrentOptions& options) : RecurrentLayer(options, "SimpleRNN", 1, 1) {}

std::vector<Tensor> SimpleRNNLayer::step(const StepInputs& in, const std::vector<Tensor>&) const {
  return {apply_activation(activation(), add(in.projected, in.recurrent))};
}

nlohmann::json SimpleRNNLayer::get_config() const { return RecurrentLayer::get_config(); }

LayerPtr SimpleRNNLayer::from_config(const nlohmann::json& config) {
  return std::make_shared<SimpleRNNLayer>(options_from_config(config, "SimpleRNN"));
}

LayerPtr SimpleRNN(std::int64_t units, const std::string& activation, bool return_sequences) {
  return SimpleRNN(RecurrentOptions{.units = units, .activation = activation, .return_sequences = return_sequences});
}
LayerPtr SimpleRNN(const RecurrentOptions& options) { return std::make_shared<SimpleRNNLayer>(options); }

}  // namespace lockstep::layers
