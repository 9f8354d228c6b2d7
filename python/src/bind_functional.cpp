// Keras' functional API: keras.Input, a layer called on a KerasTensor, keras.Model(inputs, outputs)
// (one input and one output, as lockstep's Functional).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "lockstep/training/functional.hpp"

namespace lockstep::python {

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
  m.def("functional", [](const KerasTensor& inputs, const KerasTensor& outputs, const std::string& name) {
    return std::shared_ptr<Model>(std::make_shared<Functional>(inputs, outputs, name));
  });
}

}  // namespace lockstep::python
