#pragma once
// How kernels read labels, on every backend (host and device code): a class label as an int64
// index, and accuracy's rule for whether a predicted class is a row's label. The tensor layer
// takes labels of the integer dtypes (check_integer); accuracy also reads float labels and
// one-hot rows. A kernel's caller picks its instance for the labels' dtype with visit_dtype.
#include <cstdint>
#include <type_traits>

#include "backend/dtype_visit.hpp"
#include "lockstep/core/host_device.hpp"

namespace lockstep::backend {

/// An integer label as the class index it names: its value, as int64 (range checks compare it
/// with [0, classes); the kernels that take labels read int64 ones, cast from the others).
template <typename L>
LOCKSTEP_HOST_DEVICE constexpr std::int64_t label_index(L label) {
  static_assert(std::is_integral_v<L>, "class labels are integers");
  return static_cast<std::int64_t>(label);
}

/// Accuracy's rule for a row of one class label: predicted class `arg` matches `label` compared
/// as int64 when the label is an integer and not `as_float`, else as float32 (float32(arg) ==
/// `label_float`, the label converted to float32 by the caller's backend).
template <typename L>
LOCKSTEP_HOST_DEVICE bool label_matches(std::int64_t arg, L label, float label_float, bool as_float) {
  if constexpr (std::is_integral_v<L>) {
    if (!as_float) return arg == label_index(label);
  }
  return static_cast<float>(arg) == label_float;
}

}  // namespace lockstep::backend
