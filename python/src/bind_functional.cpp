// Keras' functional API: keras.Input, a layer called on KerasTensors (one, a list for merge layers,
// or MultiHeadAttention's query and value with its keyword arguments; training= on any call; a
// call may give several tensors: return_state, return_attention_scores), keras.Model(inputs, outputs)
// of one tensor, a list or a dict each (lockstep's Functional and its Structure), and a model
// called on KerasTensors (its layers called again in the graph being built).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
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
}  // namespace

void bind_functional(nb::module_& m) {
  nb::class_<KerasTensor>(m, "KerasTensor")
      .def_prop_ro("shape", [](const KerasTensor& t) { return t.shape().dims(); })
      .def_prop_ro("layer", [](const KerasTensor& t) { return t.layer(); })
      .def_prop_ro("is_input", [](const KerasTensor& t) { return t.inputs().empty(); });
  m.def("keras_input", [](const std::vector<std::int64_t>& shape, const std::string& name) {
    return Input(Shape(shape), name);
  }, nb::arg("shape"), nb::arg("name") = "");
  // training: Keras' layer(x, training=...) (None: the mode the model runs in); mask: layer(x, mask=m);
  // initial_state: a recurrent layer's rnn(x, initial_state=[h, c]). Every tensor the call gives
  // (several for a recurrent layer with return_state).
  m.def("call_layer", [](const layers::LayerPtr& layer, const KerasTensor& x, std::optional<bool> training,
                         std::optional<KerasTensor> mask, std::optional<std::vector<KerasTensor>> initial_state) {
    return call_outputs(layer, x, CallKwargs{.training = training, .mask = mask ? &*mask : nullptr,
                                             .initial_state = initial_state ? &*initial_state : nullptr});
  }, nb::arg("layer"), nb::arg("x"), nb::arg("training") = nb::none(), nb::arg("mask") = nb::none(),
        nb::arg("initial_state") = nb::none());
  m.def("call_layer_on_list", [](const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs,
                                 std::optional<bool> training) {
    return call(layer, xs, CallKwargs{.training = training});
  }, nb::arg("layer"), nb::arg("xs"), nb::arg("training") = nb::none());
  // mha(query, value[, key], attention_mask=..., use_causal_mask=..., return_attention_scores=...,
  // training=...): [output], or [output, scores].
  m.def("call_attention", [](const layers::LayerPtr& layer, const std::vector<KerasTensor>& xs, bool use_causal_mask,
                             std::optional<KerasTensor> attention_mask, std::optional<bool> training,
                             bool return_attention_scores) {
    return call_outputs(layer, xs, CallKwargs{.training = training, .use_causal_mask = use_causal_mask,
                                              .attention_mask = attention_mask ? &*attention_mask : nullptr,
                                              .return_attention_scores = return_attention_scores});
  }, nb::arg("layer"), nb::arg("xs"), nb::arg("use_causal_mask"), nb::arg("attention_mask").none(),
        nb::arg("training") = nb::none(), nb::arg("return_attention_scores") = false);
  m.def("call_model", [](const Model& model, const std::vector<KerasTensor>& xs, std::optional<bool> training) {
    return call(model, xs, CallKwargs{.training = training});
  }, nb::arg("model"), nb::arg("xs"), nb::arg("training") = nb::none());
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
