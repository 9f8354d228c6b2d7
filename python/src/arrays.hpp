#pragma once
// NumPy arrays in and out of lockstep's tensors, and the binding's shared declarations.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <vector>

#include "lockstep/autograd/variable.hpp"
#include "lockstep/distribute/strategy.hpp"
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

/// A tensor for a Python value: a Tensor as it is, a Variable's value (this replica's copy), a
/// Python number as a scalar (of `like`'s dtype where given, else float32 / int32), anything else
/// through lockstep._support.host_array (NumPy arrays, lists); `what` names the caller in errors.
Tensor as_tensor(nb::handle value, const char* what, const Tensor* like = nullptr);
/// Python's view of a list of gradients: None for an undefined tensor (TensorFlow's None), and back.
nb::list tensors_or_none(const std::vector<Tensor>& tensors);
std::vector<Tensor> tensors_from_list(nb::handle values, const char* what);

/// A strategy and the scopes opened on it from Python (`with strategy.scope():` nests).
struct PyStrategy {
  std::unique_ptr<distribute::Strategy> strategy;
  std::vector<std::unique_ptr<distribute::StrategyScope>> scopes;
};

void bind_errors(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_loop(nb::module_& m);
void bind_functional(nb::module_& m);
void bind_data(nb::module_& m);
void bind_model(nb::module_& m);
void bind_strategy(nb::module_& m);

}  // namespace lockstep::python
