#pragma once
// A Dense layer's ReLU backward and bias gradient in one op (the backward of dense with its fused
// ReLU): fewer kernels per train step, the bits of unary_grad then sum over the rows.
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// dx = the ReLU's gradient at output y [rows, cols] for dy (dy where y > 0, else 0), as
/// unary_grad(kRelu) gives it, returned; db = sum(dx, 0), as sum gives it, set.
Tensor relu_and_bias_grad(const Tensor& y, const Tensor& dy, Tensor& db);

}  // namespace lockstep
