#pragma once
// The device interface every backend implements (ggml's backend interface is the model).
//
// A backend provides, per device kind:
//   * DeviceOps: dtype-independent memory work (copies within the device and to/from the
//     host, byte comparison), and
//   * one KernelTable per dtype, filled with designated initialisers. A null entry means
//     "not supported": supports(kind, dtype, op) says so, and the tensor layer turns a missing
//     kernel into a ValueError naming the op, the dtype and the device.
// Pointers are the table's dtype unless a signature says otherwise (labels and indices are
// int64; masks are the table's dtype). Ops (tensor layer) check shapes; kernels trust them.
#include <cstddef>
#include <cstdint>

#include "backend/context.hpp"
#include "lockstep/core/device.hpp"
#include "lockstep/core/dtype.hpp"
#include "lockstep/core/reduce_op.hpp"

namespace lockstep::backend {

enum class UnaryOp : std::uint8_t {
  kNeg, kExp, kLog, kSqrt, kSquare, kAbs, kRelu, kSigmoid, kTanh, kGelu,
  kScale, kAddScalar, kPowScalar, kClip
};
enum class BinaryOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum };
enum class CompareOp : std::uint8_t { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual };

constexpr int kMaxRank = 8;
/// Output dims and, per operand, element strides (0 on broadcast dimensions).
struct BroadcastDesc {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t a_strides[kMaxRank] = {};
  std::int64_t b_strides[kMaxRank] = {};
};

/// Adam/AdamW step constants, already in float32 (Keras' rounding).
struct AdamStep {
  float alpha = 0;   // lr * sqrt(1 - b2^t) / (1 - b1^t)
  float one_minus_b1 = 0, one_minus_b2 = 0, epsilon = 0;
  float decay = 0;   // lr * weight_decay (AdamW), 0 for Adam
};

/// A 2-D convolution over NHWC tensors: input [n, h, w, c], output [n, oh, ow, oc], kernel in
/// Keras' HWIO layout [kh, kw, c / groups, oc] (output channel o belongs to group o / (oc /
/// groups)); Keras' DepthwiseConv2D kernel [kh, kw, c, multiplier] is groups == c. Padding is
/// explicit (ops turn "same" into numbers); outputs are sized by the caller.
struct Conv2dDesc {
  std::int64_t n = 0, h = 0, w = 0, c = 0;
  std::int64_t oh = 0, ow = 0, oc = 0;
  std::int64_t kh = 1, kw = 1;
  std::int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  std::int64_t groups = 1;
  bool relu = false;      // forward only: max(conv + bias, 0)
  bool winograd = false;  // forward only: a Winograd kernel may compute it (Conv2dOptions::winograd)
};

/// 2-D max or average pooling over NHWC tensors; average pooling divides by the number of
/// window elements inside the input (padding excluded, as TensorFlow's "same").
struct Pool2dDesc {
  std::int64_t n = 0, h = 0, w = 0, c = 0;
  std::int64_t oh = 0, ow = 0;
  std::int64_t kh = 1, kw = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool max = true;
  /// Max pooling's backward only: x is a ReLU's output whose gradient the ReLU masks anyway,
  /// so a window whose maximum is not positive hands out no gradient (the ReLU would zero it):
  /// the result is then already masked and the ReLU's own pass can be skipped.
  bool relu_input = false;
};

/// Whether conv2d_max_pool2d can compute max_pool2d(conv2d(x)) for these descriptors (pool's
/// input is conv's output): a stride-1, undilated, ungrouped convolution whose window holds at
/// most kMaxFusedConvTaps inputs (kh * kw * c: a first layer's; the kernel keeps a block of
/// filters' taps in registers), pooled by windows that tile its output (stride == pool size,
/// no padding) and hold at most 255 elements (a window index is a byte).
inline constexpr std::int64_t kMaxFusedConvTaps = 32;
inline bool conv_max_pool_fusable(const Conv2dDesc& c, const Pool2dDesc& p) {
  return p.max && c.stride_h == 1 && c.stride_w == 1 && c.dilation_h == 1 && c.dilation_w == 1 && c.groups == 1 &&
         c.kh * c.kw * c.c <= kMaxFusedConvTaps && p.stride_h == p.kh && p.stride_w == p.kw && p.pad_top == 0 &&
         p.pad_left == 0 && p.pad_bottom == 0 && p.pad_right == 0 && p.kh * p.kw <= 255 && p.h == c.oh &&
         p.w == c.ow && p.c == c.oc && p.n == c.n;
}

/// One row per kernel, for supports() and error messages.
enum class KernelOp : std::uint8_t {
  kFill, kCast, kCastScaled, kCompare, kGatherRows, kGatherRowsScaled, kScatterAddRows, kCombine, kArgmax,
  kGemm, kUnary, kUnaryBackward, kBinary, kReduceSum, kReduceMax, kReduceMaxBackward, kSoftmax,
  kSoftmaxBackward, kBiasActivation, kSparseSoftmaxXent, kSparseSoftmaxXentBackward, kOneHot, kDropoutMask,
  kSumSquares, kScaleClip, kSgdUpdate, kAdamUpdate, kSgdUpdateSummed, kAdamUpdateSummed, kFirstOutside,
  kConv2d, kConv2dBackwardData, kConv2dBackwardWeights, kPool2d, kPool2dBackward,
  kConv2dMaxPool2d, kConv2dMaxPool2dBackwardWeights, kMaxUnpool2d,
  kBatchNormReduce, kBatchNormApply, kBatchNormBackward,
  kCount
};
const char* kernel_op_name(KernelOp op);

/// Explicit instantiations of the integer tables' own kernels, for a backend's kernel file to
/// expand in its namespace for each integer dtype (both backends declare these templates).
#define LOCKSTEP_INTEGER_KERNELS(I)                                                                    \
  template std::int64_t first_outside<I>(ComputeContext&, const void*, std::int64_t, std::int64_t);   \
  template void cast_scaled<I>(ComputeContext&, const void*, float, float*, std::int64_t);            \
  template void gather_rows_scaled<I>(ComputeContext&, const void*, const std::int64_t*, std::int64_t, \
                                      std::int64_t, float, float*);

struct KernelTable {
  // ---- storage: every dtype ----
  void (*fill)(ComputeContext&, void* dst, std::int64_t n, double value) = nullptr;
  /// dst[i] = convert(src[i]); src is the table's dtype, dst is `to` (numpy's casting: floats
  /// to ints truncate toward zero, float32 to 16-bit floats rounds to nearest even).
  void (*cast)(ComputeContext&, const void* src, DType to, void* dst, std::int64_t n) = nullptr;
  /// dst[i] = float32(src[i]) * scale, rounded once (integer tables of both backends): a cast and
  /// a Rescaling in one pass, what a model that scales its own uint8 pixels does first.
  void (*cast_scaled)(ComputeContext&, const void* src, float scale, float* dst, std::int64_t n) = nullptr;
  /// out[i] = a (op) b ? 1 : 0, as uint8, with broadcasting.
  void (*compare)(ComputeContext&, CompareOp, const BroadcastDesc&, const void* a, const void* b,
                  std::uint8_t* out) = nullptr;
  /// dst[r] = src[index[r]] for rows of `row` elements.
  void (*gather_rows)(ComputeContext&, const void* src, const std::int64_t* index, std::int64_t rows,
                      std::int64_t row, void* dst) = nullptr;
  /// dst[r] = float32(src[index[r]]) * scale, as cast_scaled rounds it (integer tables): a batch of
  /// integer pixels gathered as the floats a model takes, reading a quarter of the bytes for uint8.
  void (*gather_rows_scaled)(ComputeContext&, const void* src, const std::int64_t* index, std::int64_t rows,
                             std::int64_t row, float scale, float* dst) = nullptr;
  /// dst[index[r]] += src[r].
  void (*scatter_add_rows)(ComputeContext&, const void* src, const std::int64_t* index, std::int64_t rows,
                           std::int64_t row, void* dst) = nullptr;
  /// Elements [begin, end): acc = in[0] (op) in[1] (op) ... in that order (kMean divides by
  /// n_in at the end), written to every out[j]. Outputs may alias inputs (a collective's
  /// buffers are both), so each block is combined before any output is written.
  void (*combine)(ComputeContext&, ReduceOp, const void* const* in, int n_in, void* const* out, int n_out,
                  std::int64_t begin, std::int64_t end) = nullptr;
  /// Index of the largest value of each [outer, axis, inner] slice (first one; NaN wins).
  void (*argmax)(ComputeContext&, const void* x, std::int64_t* arg, std::int64_t outer, std::int64_t axis,
                 std::int64_t inner) = nullptr;

  // ---- floating-point compute (float32 arithmetic for every floating dtype) ----
  /// C = alpha * op(A) @ op(B) + beta * C, row-major.
  void (*gemm)(ComputeContext&, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
               float alpha, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c,
               std::int64_t ldc) = nullptr;
  void (*unary)(ComputeContext&, UnaryOp, const void* x, void* y, std::int64_t n, float p0, float p1) = nullptr;
  /// dx = dy * d(op)/dx, given x and y = op(x).
  void (*unary_backward)(ComputeContext&, UnaryOp, const void* x, const void* y, const void* dy, void* dx,
                         std::int64_t n, float p0, float p1) = nullptr;
  void (*binary)(ComputeContext&, BinaryOp, const BroadcastDesc&, const void* a, const void* b, void* out) = nullptr;
  /// Reductions over the middle axis of an [outer, axis, inner] view: out is [outer, inner];
  /// `post_scale` multiplies each result (1/axis for a mean).
  void (*reduce_sum)(ComputeContext&, const void* x, void* out, std::int64_t outer, std::int64_t axis,
                     std::int64_t inner, float post_scale) = nullptr;
  void (*reduce_max)(ComputeContext&, const void* x, void* out, std::int64_t* argmax, std::int64_t outer,
                     std::int64_t axis, std::int64_t inner) = nullptr;
  /// dx = 0 except dx[arg of each slice] = g (the gradient of reduce_max).
  void (*reduce_max_backward)(ComputeContext&, const std::int64_t* arg, const void* g, void* dx, std::int64_t outer,
                              std::int64_t axis, std::int64_t inner) = nullptr;
  /// Softmax over the last axis of [rows, cols]; log_softmax when `log` is true.
  void (*softmax)(ComputeContext&, const void* x, void* y, std::int64_t rows, std::int64_t cols, bool log) = nullptr;
  void (*softmax_backward)(ComputeContext&, const void* y, const void* dy, void* dx, std::int64_t rows,
                           std::int64_t cols, bool log) = nullptr;
  /// y[r, c] += bias[c], then relu when `relu`; bias may be null.
  void (*bias_activation)(ComputeContext&, void* y, const void* bias, std::int64_t rows, std::int64_t cols,
                          bool relu) = nullptr;
  /// loss[r] = -log_softmax(logits)[r, label[r]]; probs = softmax(logits).
  void (*sparse_softmax_xent)(ComputeContext&, const void* logits, const std::int64_t* labels, void* loss,
                              void* probs, std::int64_t rows, std::int64_t cols) = nullptr;
  /// dlogits[r, c] = (probs[r, c] - [c == label[r]]) * g[r].
  void (*sparse_softmax_xent_backward)(ComputeContext&, const void* probs, const std::int64_t* labels,
                                       const void* g, void* dlogits, std::int64_t rows, std::int64_t cols) = nullptr;
  /// out = zeros(rows, classes) with out[r, label[r]] = 1.
  void (*one_hot)(ComputeContext&, const std::int64_t* labels, std::int64_t rows, std::int64_t classes,
                  void* out) = nullptr;
  /// mask[r, u] = keep ? 1/(1-rate) : 0, from the counter-based RNG.
  void (*dropout_mask)(ComputeContext&, void* mask, std::int64_t rows, std::int64_t cols, float rate,
                       std::uint64_t seed, std::uint64_t stream, std::uint64_t step, std::int64_t first_row) = nullptr;

  // ---- convolution and pooling (float32) ----
  /// y = conv(x, w) [+ bias]; bias may be null.
  void (*conv2d)(ComputeContext&, const Conv2dDesc&, const void* x, const void* w, const void* bias,
                 void* y) = nullptr;
  /// dx of conv2d from the kernel and dy.
  void (*conv2d_backward_data)(ComputeContext&, const Conv2dDesc&, const void* w, const void* dy,
                               void* dx) = nullptr;
  /// dw (and db when not null) of conv2d from x and dy. The batch is split over the pool in
  /// fixed parts whose partial sums are added in part order (bit-reproducible per pool size).
  void (*conv2d_backward_weights)(ComputeContext&, const Conv2dDesc&, const void* x, const void* dy, void* dw,
                                  void* db) = nullptr;
  void (*pool2d)(ComputeContext&, const Pool2dDesc&, const void* x, void* y) = nullptr;
  /// dx of pool2d given its input x, its output y and dy; max pooling sends each gradient to the
  /// first (row-major) element of its window equal to the maximum.
  void (*pool2d_backward)(ComputeContext&, const Pool2dDesc&, const void* x, const void* y, const void* dy,
                          void* dx) = nullptr;
  /// y = max_pool2d(conv2d(x, w, bias)) (conv's relu applied) without storing the convolution's
  /// output, for descriptors conv_max_pool_fusable accepts; `arg` [n, p.oh, p.ow, oc] gets the
  /// row-major index inside its window of each maximum (the first of equal ones; a NaN wins).
  void (*conv2d_max_pool2d)(ComputeContext&, const Conv2dDesc& c, const Pool2dDesc& p, const void* x, const void* w,
                            const void* bias, void* y, std::uint8_t* arg) = nullptr;
  /// dw (and db when not null) of conv2d_max_pool2d from x, its y and arg, and dy: each dy goes
  /// to its window's arg (when p.relu_input, only where y > 0). Summed in fixed batch parts, in
  /// part order, as conv2d_backward_weights.
  void (*conv2d_max_pool2d_backward_weights)(ComputeContext&, const Conv2dDesc& c, const Pool2dDesc& p,
                                             const void* x, const void* y, const std::uint8_t* arg, const void* dy,
                                             void* dw, void* db) = nullptr;
  /// The gradient of max pooling's input [n, p.h, p.w, c] from y, arg (as conv2d_max_pool2d
  /// writes them) and dy: dy at each window's arg (when p.relu_input, only where y > 0), zero
  /// elsewhere.
  void (*max_unpool2d)(ComputeContext&, const Pool2dDesc& p, const void* y, const std::uint8_t* arg, const void* dy,
                       void* dx) = nullptr;

  // ---- BatchNormalization over x [rows, cols] (cols = channels; float32). Every per-channel
  // argument is [cols]. A per-channel sum is taken over a fixed partition of the rows, each part
  // accumulated in double and the parts added in order: the same bits whatever the pool. ----
  /// dy null: out[c] = sum_r (x[r, c] - mean[c])^2. dy given: out[c] = sum_r dy[r, c] and
  /// out[cols + c] = sum_r dy[r, c] (x[r, c] - mean[c]) inv_std[c] (beta's and gamma's gradients).
  void (*batch_norm_reduce)(ComputeContext&, const void* x, const void* mean, const void* dy, const void* inv_std,
                            void* out, std::int64_t rows, std::int64_t cols) = nullptr;
  /// y[r, c] = (x[r, c] - mean[c]) scale[c] + offset[c]; offset may be null.
  void (*batch_norm_apply)(ComputeContext&, const void* x, const void* mean, const void* scale, const void* offset,
                           void* y, std::int64_t rows, std::int64_t cols) = nullptr;
  /// The input's gradient through the batch statistics:
  /// dx[r, c] = scale[c] (dy[r, c] - mean_dy[c] - (x[r, c] - mean[c]) inv_std[c] mean_dy_xhat[c]).
  void (*batch_norm_backward)(ComputeContext&, const void* dy, const void* x, const void* mean, const void* inv_std,
                              const void* scale, const void* mean_dy, const void* mean_dy_xhat, void* dx,
                              std::int64_t rows, std::int64_t cols) = nullptr;

  // ---- optimizer updates, fused (the variable's memory is updated in place) ----
  /// sum of x[i]^2, accumulated in double.
  double (*sum_squares)(ComputeContext&, const void* x, std::int64_t n) = nullptr;
  /// y[i] = clamp(x[i] * scale, -clip, clip).
  void (*scale_clip)(ComputeContext&, const void* x, void* y, std::int64_t n, float scale, float clip) = nullptr;
  /// Keras' SGD: without momentum (m null) w -= lr g; else m = mu m - lr g, w += m
  /// (nesterov: w += mu m - lr g).
  void (*sgd_update)(ComputeContext&, void* w, void* m, const void* g, std::int64_t n, float lr, float momentum,
                     bool nesterov) = nullptr;
  /// Keras' Adam/AdamW: m += (g - m)(1-b1); v += (g^2 - v)(1-b2); w -= w decay + alpha m / (sqrt v + eps).
  void (*adam_update)(ComputeContext&, void* w, void* m, void* v, const void* g, std::int64_t n,
                      const AdamStep& s) = nullptr;
  /// sgd_update and adam_update for the sharded update of replicas that share memory: the
  /// gradient is the replicas' own gradients g[0..n_g) summed in that order, ((g[0] + g[1]) +
  /// g[2]) ..., bit for bit combine's kSum, and the new w is also stored into copies[0..n_copies)
  /// (the other replicas' copies of these elements). No bucket is packed, no sum written.
  void (*sgd_update_summed)(ComputeContext&, void* w, void* m, const void* const* g, int n_g, void* const* copies,
                            int n_copies, std::int64_t n, float lr, float momentum, bool nesterov) = nullptr;
  void (*adam_update_summed)(ComputeContext&, void* w, void* m, void* v, const void* const* g, int n_g,
                             void* const* copies, int n_copies, std::int64_t n, const AdamStep& s) = nullptr;

  // ---- integer dtypes ----
  /// Index of the first value outside [0, limit), or -1.
  std::int64_t (*first_outside)(ComputeContext&, const void* labels, std::int64_t n, std::int64_t limit) = nullptr;
};

/// Memory work that does not depend on a dtype.
struct DeviceOps {
  /// Within one device (or between two devices of this kind).
  void (*copy)(ComputeContext&, void* dst, const void* src, std::size_t bytes) = nullptr;
  void (*copy_to_host)(ComputeContext&, void* host_dst, const void* src, std::size_t bytes) = nullptr;
  void (*copy_from_host)(ComputeContext&, void* dst, const void* host_src, std::size_t bytes) = nullptr;
  void (*zero)(ComputeContext&, void* dst, std::size_t bytes) = nullptr;
  bool (*equal_bytes)(ComputeContext&, const void* a, const void* b, std::size_t bytes) = nullptr;

  // ---- copies beside the device's work (DeviceUpload); null where work runs in order (CPU) ----
  // A fence is an opaque mark in a device's queue of work; each is consumed by the one call it
  // is handed to.
  /// A fence after the work queued so far on the context's compute stream (copy_stream = false)
  /// or on its device's copy stream (true).
  void* (*record_fence)(ComputeContext&, bool copy_stream) = nullptr;
  /// Queues a copy of host memory to `dst` on the device's copy stream, after `after` (may be
  /// null) has passed. The host memory may be reused as soon as it returns.
  void (*copy_from_host_beside)(ComputeContext&, void* dst, const void* host, std::size_t bytes,
                                void* after) = nullptr;
  /// The work queued on the context's compute stream from now on waits for `fence`.
  void (*wait_fence)(ComputeContext&, void* fence) = nullptr;
};

// ---- the registry (src/backend/registry.cpp: the one place that knows the backends) ----
/// The kernels of `dtype` on a device kind; an empty table when that backend is not built.
const KernelTable& kernels(DeviceKind kind, DType dtype);
const DeviceOps& device_ops(DeviceKind kind);
/// Whether `op` exists for (kind, dtype).
bool supports(DeviceKind kind, DType dtype, KernelOp op);
/// Whether a backend for `kind` is compiled in and has kernels.
bool backend_available(DeviceKind kind);

}  // namespace lockstep::backend
