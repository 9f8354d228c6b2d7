// Keras' model(x) on KerasTensors: a model's layers called again in the graph being built.
#include "lockstep/core/error.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep {

namespace {
// A layer the Sequential named and that is not built yet is named afresh by the model being built
// (when it is made), as a layer called there unnamed; its name comes back until then, so that the
// Sequential holds unique names whatever happens to this graph.
KerasTensor call_renamed(const layers::LayerPtr& layer, const KerasTensor& x, const CallKwargs& kwargs) {
  const std::string given = layer->name();
  layer->set_name("");
  try {
    KerasTensor y = call(layer, x, kwargs);
    layer->set_name(given);
    return y;
  } catch (...) {
    layer->set_name(given);
    throw;
  }
}

KerasTensor call_sequential(const Sequential& model, const std::vector<KerasTensor>& xs, const CallKwargs& kwargs) {
  LOCKSTEP_CHECK(xs.size() == 1, "Sequential '", model.name(), "' takes one input but is called on ", xs.size());
  KerasTensor x = xs.front();
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    const auto& layer = model.layers()[i];
    if (dynamic_cast<const layers::InputLayer*>(layer.get()) != nullptr) continue;
    x = model.named_layer(i) && !layer->built() ? call_renamed(layer, x, kwargs) : call(layer, x, kwargs);
  }
  return x;
}

std::vector<KerasTensor> call_functional(const Functional& model, const std::vector<KerasTensor>& xs,
                                         const CallKwargs& kwargs) {
  const auto& nodes = model.nodes();
  const std::size_t n_inputs = model.input_structure().size();
  LOCKSTEP_CHECK(xs.size() == n_inputs, "model '", model.name(), "' takes ", n_inputs, " inputs (",
                 model.input_structure().joined(), ") but is called on ", xs.size());
  std::vector<std::vector<KerasTensor>> values(nodes.size());  // per node, the tensors its call gives
  for (std::size_t i = 0; i < n_inputs; ++i) {
    LOCKSTEP_CHECK(xs[i].shape().tail() == nodes[i].output_shape.tail(), "model '", model.name(),
                   "' takes input '", model.input_structure().names[i], "' of shape ", nodes[i].output_shape.str(),
                   " but is called on ", xs[i].shape().str());
    values[i] = {xs[i]};
  }
  for (std::size_t i = n_inputs; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    const auto input = [&](std::size_t a) -> const KerasTensor& {
      return values[node.inputs[a]].at(static_cast<std::size_t>(node.input_index[a]));
    };
    std::vector<KerasTensor> args, states;
    for (std::size_t a = 0; a < node.arguments(); ++a) args.push_back(input(a));
    for (std::size_t a = node.arguments(); a < node.arguments() + node.initial_states; ++a) states.push_back(input(a));
    const KerasTensor* last =
        node.inputs.size() > node.arguments() + node.initial_states ? &input(node.inputs.size() - 1) : nullptr;
    // The innermost call's own mode first, as a layer's own training= goes before its model's.
    values[i] = call_outputs(model.layers()[node.layer], args,
                             CallKwargs{.training = node.training ? node.training : kwargs.training,
                                        .use_causal_mask = node.use_causal_mask,
                                        .attention_mask = node.attention_mask ? last : nullptr,
                                        .mask = node.call_mask ? last : nullptr,
                                        .return_attention_scores = node.return_attention_scores,
                                        .initial_state = node.initial_states ? &states : nullptr});
  }
  std::vector<KerasTensor> outputs;
  for (std::size_t k = 0; k < model.output_nodes().size(); ++k)
    outputs.push_back(values[model.output_nodes()[k]].at(static_cast<std::size_t>(model.output_indices()[k])));
  return outputs;
}
}  // namespace

std::vector<KerasTensor> call(const Model& model, const std::vector<KerasTensor>& xs) {
  return call(model, xs, CallKwargs{});
}

std::vector<KerasTensor> call(const Model& model, const std::vector<KerasTensor>& xs, const CallKwargs& kwargs) {
  LOCKSTEP_CHECK(!xs.empty(), "model '", model.name(), "' is called on no tensors");
  LOCKSTEP_CHECK(!kwargs.use_causal_mask && kwargs.attention_mask == nullptr && kwargs.mask == nullptr &&
                     !kwargs.return_attention_scores && kwargs.initial_state == nullptr,
                 "model '", model.name(), "' takes no use_causal_mask, attention_mask or return_attention_scores (a "
                 "MultiHeadAttention call does), no mask (a Softmax call does) and no initial_state (a recurrent "
                 "layer's call does); only training");
  if (const auto* sequential = dynamic_cast<const Sequential*>(&model))
    return {call_sequential(*sequential, xs, kwargs)};
  const auto* functional = dynamic_cast<const Functional*>(&model);
  LOCKSTEP_CHECK(functional != nullptr, "model '", model.name(), "' cannot be called on KerasTensors");
  return call_functional(*functional, xs, kwargs);
}

}  // namespace lockstep
