#pragma once
// The narrow interface every backend implements: a table of primitive float32 kernels.
// Ops (tensor layer) check shapes and choose; kernels trust their arguments.
#include <cstdint>

#include "backend/context.hpp"
#include "lockstep/core/device.hpp"

namespace lockstep::backend {

enum class UnaryOp : std::uint8_t {
  kNeg, kExp, kLog, kSqrt, kSquare, kAbs, kRelu, kSigmoid, kTanh, kGelu,
  kScale, kAddScalar, kPowScalar, kClip
};
enum class BinaryOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kMaximum };

constexpr int kMaxRank = 8;
/// Output dims and, per operand, element strides (0 on broadcast dimensions).
struct BroadcastDesc {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t a_strides[kMaxRank] = {};
  std::int64_t b_strides[kMaxRank] = {};
};

struct KernelTable {
  // C = alpha * op(A) @ op(B) + beta * C, row-major.
  void (*gemm)(ComputeContext&, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
               float* c, std::int64_t ldc);
  void (*unary)(ComputeContext&, UnaryOp, const float* x, float* y, std::int64_t n, float p0, float p1);
  // dx = dy * d(op)/dx, given x and y = op(x).
  void (*unary_backward)(ComputeContext&, UnaryOp, const float* x, const float* y, const float* dy, float* dx,
                         std::int64_t n, float p0, float p1);
  void (*binary)(ComputeContext&, BinaryOp, const BroadcastDesc&, const float* a, const float* b, float* out);
  // Reductions over the middle axis of a [outer, axis, inner] view: out is [outer, inner].
  void (*reduce_sum)(ComputeContext&, const float* x, float* out, std::int64_t outer, std::int64_t axis,
                     std::int64_t inner);
  void (*reduce_max)(ComputeContext&, const float* x, float* out, std::int64_t* argmax, std::int64_t outer,
                     std::int64_t axis, std::int64_t inner);
  // Softmax over the last axis of [rows, cols]; log_softmax when `log` is true.
  void (*softmax)(ComputeContext&, const float* x, float* y, std::int64_t rows, std::int64_t cols, bool log);
  void (*softmax_backward)(ComputeContext&, const float* y, const float* dy, float* dx, std::int64_t rows,
                           std::int64_t cols, bool log);
  // y[r, c] += bias[c], then relu when `relu`; bias may be null.
  void (*bias_activation)(ComputeContext&, float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                          bool relu);
  // loss[r] = -log_softmax(logits)[r, label[r]]; probs = softmax(logits). Labels as int64.
  void (*sparse_softmax_xent)(ComputeContext&, const float* logits, const std::int64_t* labels, float* loss,
                              float* probs, std::int64_t rows, std::int64_t cols);
  // mask[r, u] = keep ? 1/(1-rate) : 0, from the counter-based RNG.
  void (*dropout_mask)(ComputeContext&, float* mask, std::int64_t rows, std::int64_t cols, float rate,
                       std::uint64_t seed, std::uint64_t stream, std::uint64_t step, std::int64_t first_row);
};

/// The kernels for a device kind; throws ValueError when that backend is not built.
const KernelTable& kernels(DeviceKind kind);

}  // namespace lockstep::backend
