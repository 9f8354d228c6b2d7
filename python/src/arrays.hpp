#pragma once
// NumPy arrays in and out of lockstep's tensors, and the binding's shared declarations.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::python {

namespace nb = nanobind;
using HostArray = nb::ndarray<nb::c_contig, nb::device::cpu>;
using NumpyArray = nb::ndarray<nb::numpy>;

/// A tensor holding a copy of `a` (float32, float16, int32, int64 or uint8; ValueError naming
/// the dtype otherwise, e.g. float64, which the Python package converts to float32 first).
Tensor tensor_from_array(const HostArray& a, const char* what);
/// A NumPy array holding a copy of `t` (from any device).
NumpyArray array_from_tensor(const Tensor& t);

void bind_errors(nb::module_& m);
void bind_data(nb::module_& m);
void bind_model(nb::module_& m);
void bind_strategy(nb::module_& m);

}  // namespace lockstep::python
