#pragma once
// Tensor operations as free functions. Each checks its arguments (a ValueError names the op and
// the offending shapes), computes on the current compute context, and, when a GradientTape is
// recording on this thread and an input is watched, records itself for reverse mode.
// Floating-point ops take and return float32 tensors unless stated otherwise.
#include <cstdint>
#include <optional>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

// ---- elementwise, with numpy broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
/// a * s
Tensor scale(const Tensor& a, float s);
/// a + s
Tensor add_scalar(const Tensor& a, float s);
/// a ** p
Tensor pow_scalar(const Tensor& a, float p);
/// min(max(a, lo), hi); the gradient passes where lo <= a <= hi.
Tensor clip(const Tensor& a, float lo, float hi);

Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
/// GELU, tanh approximation off: x * Phi(x) with the exact erf form (Keras' default).
Tensor gelu(const Tensor& a);
/// Softmax / log-softmax along `axis` (numerically stable: max is subtracted first).
Tensor softmax(const Tensor& a, int axis = -1);
Tensor log_softmax(const Tensor& a, int axis = -1);

// ---- linear algebra ----
/// 2-D matrix product op(a) @ op(b).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
enum class FusedActivation { kNone, kRelu };
/// x (N, in) @ kernel (in, out) + bias (out) [, relu]; bias may be undefined. One pass over the output.
Tensor dense(const Tensor& x, const Tensor& kernel, const Tensor& bias,
             FusedActivation activation = FusedActivation::kNone);

// ---- reductions ----
/// Sum over `axis` (all elements when nullopt).
Tensor sum(const Tensor& a, std::optional<int> axis = std::nullopt, bool keepdims = false);
Tensor mean(const Tensor& a, std::optional<int> axis = std::nullopt, bool keepdims = false);
Tensor reduce_max(const Tensor& a, int axis, bool keepdims = false);
/// Index of the largest value along `axis`, as int64 (not differentiable).
Tensor argmax(const Tensor& a, int axis = -1);
/// Sums `a` down to `shape` (the reverse of broadcasting `shape` up to a.shape()).
Tensor sum_to_shape(const Tensor& a, const Shape& shape);

// ---- shape ----
/// Recorded reshape (the gradient is reshaped back).
Tensor reshape(const Tensor& a, const Shape& shape);
/// Cuts the gradient: the result is a, but the tape treats it as a constant.
Tensor stop_gradient(const Tensor& a);
Tensor cast(const Tensor& a, DType dtype);

// ---- neural-network ops ----
/// Per-example cross-entropy between integer labels (N,) [any int or u8 dtype] and logits (N, C).
Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits);
/// Per-example cross-entropy between probability targets (N, C) and logits (N, C).
Tensor softmax_cross_entropy_with_logits(const Tensor& targets, const Tensor& logits);

/// Keys of the counter-based dropout RNG: the mask of unit u of example e depends only on
/// (seed, stream, step, first_example + row, u), never on how a batch is split or threaded.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;  // distinguishes dropout layers
  std::uint64_t step = 0;
  std::int64_t first_example = 0;  // global index of row 0 of this (per-replica) batch
};
/// Inverted dropout: zeroes each unit with probability rate and scales the rest by 1/(1-rate).
Tensor dropout(const Tensor& x, float rate, const DropoutKey& key);

/// Fraction of rows whose argmax equals the integer label, per example as float (1 or 0).
Tensor sparse_categorical_matches(const Tensor& labels, const Tensor& predictions);

}  // namespace lockstep
