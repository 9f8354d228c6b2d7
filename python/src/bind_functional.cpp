// Keras' functional API: keras.Input, a layer called on KerasTensors (one, a list for merge layers,
// or MultiHeadAttention's query and value with its keyword arguments), keras.Model(inputs, outputs)
// of one tensor, a list or a dict each (lockstep's Functional and its Structure), and a model
// called on KerasTensors (its layers called again in the graph being built).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep::python {

namespace {
// Python's side flattens a model's inputs or outputs (keras/models.py): "one" (a single tensor),
// "list", or "dict" (the tensors under `keys`, in any order: KerasTensors sorts them).
KerasTensors keras_tensors(const std::string& form, const std::vector<KerasTensor>& flat,
                           const std::vector<std::string>& keys) {
  if (form == "one") {
    LOCKSTEP_CHECK(flat.size() == 1, "keras.Model: one tensor expected, got ", flat.size());
    return KerasTensors(flat.front());
  }
  if (form == "list") return KerasTensors(flat);
  LOCKSTEP_CHECK(form == "dict" && keys.size() == flat.size(), "keras.Model: a structure of form '", form, "' with ",
                 keys.size(), " keys for ", flat.size(), " tensors");
  std::map<std::string, KerasTensor> dict;
  for (std::size_t i = 0; i < flat.size(); ++i) dict.emplace(keys[i], flat[i]);
  return KerasTensors(dict);
}

// Keras' model(x) on KerasTensors, one per input in the input structure's order: the model's
// layers called again on them, the same layer objects (so weights are shared, as Keras shares a
// nested model's), giving one KerasTensor per output. A Sequential's layers are chained (an
// InputLayer skipped); a Functional's nodes are replayed in their execution order.
// `auto_named`: per layer of a Sequential, whether the Sequential named it (the user gave no
// name). Such a layer not yet built is named afresh by the model being built (when it is made),
// as a layer called there unnamed is: two Sequentials of Dense layers each name theirs dense,
// dense_1, and one model calling both would hold two layers named dense (Keras names layers
// uniquely per program).
std::vector<KerasTensor> call_model(const Model& model, const std::vector<KerasTensor>& xs,
                                    const std::vector<bool>& auto_named) {
  LOCKSTEP_CHECK(!xs.empty(), "model '", model.name(), "' is called on no tensors");
  if (dynamic_cast<const Sequential*>(&model) != nullptr) {
    LOCKSTEP_CHECK(xs.size() == 1, "Sequential '", model.name(), "' takes one input but is called on ",
                   xs.size());
    KerasTensor x = xs.front();
    for (std::size_t i = 0; i < model.layers().size(); ++i) {
      const auto& layer = model.layers()[i];
      if (dynamic_cast<const layers::InputLayer*>(layer.get()) != nullptr) continue;
      if (i < auto_named.size() && auto_named[i] && !layer->built()) {
        // Called unnamed, the node is one the model numbers; the name comes back until it does,
        // so that the Sequential holds unique names whatever happens to this graph.
        const std::string given = layer->name();
        layer->set_name("");
        try {
          x = call(layer, x);
        } catch (...) {
          layer->set_name(given);
          throw;
        }
        layer->set_name(given);
        continue;
      }
      x = call(layer, x);
    }
    return {x};
  }
  const auto* functional = dynamic_cast<const Functional*>(&model);
  LOCKSTEP_CHECK(functional != nullptr, "model '", model.name(), "' cannot be called on KerasTensors");
  const auto& nodes = functional->nodes();
  const std::size_t n_inputs = model.input_structure().size();
  LOCKSTEP_CHECK(xs.size() == n_inputs, "model '", model.name(), "' takes ", n_inputs, " inputs (",
                 model.input_structure().joined(), ") but is called on ", xs.size());
  std::vector<KerasTensor> values(nodes.size());
  for (std::size_t i = 0; i < n_inputs; ++i) {
    LOCKSTEP_CHECK(xs[i].shape().tail() == nodes[i].output_shape.tail(), "model '", model.name(),
                   "' takes input '", model.input_structure().names[i], "' of shape ",
                   nodes[i].output_shape.str(), " but is called on ", xs[i].shape().str());
    values[i] = xs[i];
  }
  for (std::size_t i = n_inputs; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    std::vector<KerasTensor> args;
    for (std::size_t a = 0; a < node.arguments(); ++a) args.push_back(values[node.inputs[a]]);
    const KerasTensor* mask = node.attention_mask ? &values[node.inputs.back()] : nullptr;
    values[i] = call(model.layers()[node.layer], args,
                     CallKwargs{.use_causal_mask = node.use_causal_mask, .attention_mask = mask});
  }
  std::vector<KerasTensor> outputs;
  for (const std::size_t o : functional->output_nodes()) outputs.push_back(values[o]);
  return outputs;
}
}  // namespace

void bind_functional(nb::module_& m) {
  nb::class_<KerasTensor>(m, "KerasTensor")
      .def_prop_ro("shape", [](const KerasTensor& t) { return t.shape().dims(); })
      .def_prop_ro("layer", [](const KerasTensor& t) { return t.layer(); })
      .def_prop_ro("is_input", [](const KerasTensor& t) { return t.inputs().empty(); });
  m.def("keras_input", [](const std::vector<std::int64_t>& shape, const std::string& name) {
    return Input(Shape(shape), name);
  }, nb::arg("shape"), nb::arg("name") = "");
  m.def("call_layer", [](const layers::LayerPtr& layer, const KerasTensor& x) { return call(layer, x); });
  m.def("call_layer_on_list", [](const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs) {
    return call(layer, xs);
  });
  // mha(query, value[, key], attention_mask=..., use_causal_mask=...).
  m.def("call_attention", [](const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs, bool use_causal_mask,
                             std::optional<KerasTensor> attention_mask) {
    return call(layer, xs, CallKwargs{.use_causal_mask = use_causal_mask,
                                      .attention_mask = attention_mask ? &*attention_mask : nullptr});
  });
  m.def("call_model", &call_model, nb::arg("model"), nb::arg("xs"),
        nb::arg("auto_named") = std::vector<bool>{});
  m.def("functional", [](const std::string& inputs_form, const std::vector<KerasTensor>& inputs,
                         const std::vector<std::string>& input_keys, const std::string& outputs_form,
                         const std::vector<KerasTensor>& outputs, const std::vector<std::string>& output_keys,
                         const std::string& name) {
    return std::shared_ptr<Model>(std::make_shared<Functional>(keras_tensors(inputs_form, inputs, input_keys),
                                                               keras_tensors(outputs_form, outputs, output_keys),
                                                               name));
  });
}

}  // namespace lockstep::python
