#pragma once
// The device interface every backend implements (ggml's backend interface is the model).
//
// A backend provides, per device kind:
//   * DeviceOps: dtype-independent memory work (copies within the device and to/from the
//     host, byte comparison), and
//   * one KernelTable per dtype, whose fields are the op list's rows (kernel_ops.def: each op's
//     name, dtypes and signature, written once); backend_kernels.inc declares a backend's
//     kernels from it and builds its tables. A null entry means "not supported":
//     supports(kind, dtype, op) says so, and the tensor layer turns a missing kernel into a
//     ValueError naming the op, the dtype and the device.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/context.hpp"
#include "lockstep/core/clip_math.hpp"
#include "lockstep/core/device.hpp"
#include "lockstep/core/dtype.hpp"
#include "lockstep/core/half.hpp"
#include "lockstep/core/host_device.hpp"
#include "lockstep/core/reduce_op.hpp"
#include "lockstep/core/step_state.hpp"

namespace lockstep::backend {

enum class UnaryOp : std::uint8_t {
  kNeg, kExp, kLog, kSqrt, kSquare, kAbs, kRelu, kSigmoid, kTanh, kGelu,
  kScale, kAddScalar, kPowScalar, kClip, kSilu
};
enum class BinaryOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum };
enum class CompareOp : std::uint8_t { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual };
/// What random_fill draws (backend/dropout_rng.hpp says how): uniform in [0, 1), or standard normal.
enum class RandomDistribution : std::uint8_t { kUniform, kStandardNormal };

constexpr int kMaxRank = 8;
/// Output dims and, per operand, element strides (0 on broadcast dimensions).
struct BroadcastDesc {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t a_strides[kMaxRank] = {};
  std::int64_t b_strides[kMaxRank] = {};
};
/// where's three operands: the output's dims with a's and b's strides (`ab`), and the
/// condition's element strides (0 on broadcast dimensions).
struct WhereDesc {
  BroadcastDesc ab;
  std::int64_t cond_strides[kMaxRank] = {};
};
/// A permutation of a tensor's axes (transpose): the output's dims and, per output axis, the
/// input's element stride along the axis that becomes it.
struct TransposeDesc {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t src_strides[kMaxRank] = {};
};

/// Adam/AdamW's constants of every step, already in float32 (Keras' rounding); the step's own
/// (alpha, decay) are its StepScalars'.
struct AdamStep {
  float one_minus_b1 = 0, one_minus_b2 = 0, epsilon = 0;
};
/// RMSprop's constants of every step in float32 (Keras' rounding: rho and epsilon rounded, 1 - rho
/// computed in double, then rounded); the step's learning rate is its StepScalars'. momentum 0:
/// no momentum slot.
struct RmspropStep {
  float rho = 0, one_minus_rho = 0, epsilon = 0, momentum = 0;
};
/// A device-side error mark (error_marks.hpp): where a kernel that checks values on the device
/// (mark_outside) records the first one it found wrong, for the host to raise after it waited for
/// the device. In host memory the device writes (mapped, pinned on a GPU), at a fixed address per
/// context; `set` is written last (after a system fence) and cleared by the host.
struct ErrorMark {
  std::int64_t index = 0, value = 0, limit = 0, site = 0;
  std::uint32_t set = 0;
};
/// Whether index `i` is inside [0, n): what the kernels that take labels or indices test before
/// they read or write the row it names (a device's labels are checked by mark_outside, raised later).
LOCKSTEP_HOST_DEVICE constexpr bool inside(std::int64_t i, std::int64_t n) {
  return static_cast<std::uint64_t>(i) < static_cast<std::uint64_t>(n);
}
// NaN through the elementwise kernels, every backend's (a NaN in gives a NaN out, as TensorFlow's
// ops): each kernel whose output is a maximum or minimum of floats (ReLU, maximum, minimum, max
// pooling) writes it with these, never with `v > 0 ? v : 0` or fmaxf / fminf, which turn a NaN
// into the other operand. (A softmax's shift by its row's maximum may skip a NaN: the row's sum
// is NaN anyway.) A model whose weights became NaN then gives a NaN loss on every device, and
// TerminateOnNaN stops it.
/// ReLU: max(v, 0) keeping a NaN (an ordered compare is false for it); -0 gives +0.
LOCKSTEP_HOST_DEVICE constexpr float relu_of(float v) { return v <= 0.0f ? 0.0f : v; }
/// The larger (smaller) of a and b, NaN if either is (numpy's maximum); b where they are equal.
LOCKSTEP_HOST_DEVICE constexpr float max_of(float a, float b) { return a > b || a != a ? a : b; }
LOCKSTEP_HOST_DEVICE constexpr float min_of(float a, float b) { return a < b || a != a ? a : b; }
/// Whether window element x gave the window's maximum m (max_of's): it equals m, or both are NaN.
/// Max pooling's backward sends a window's gradient to its first such element, row-major (TF's
/// first maximum), on every path, fused or not: a window whose maximum is NaN sends it to its
/// first NaN, the element that produced the output, as PyTorch (whose max_pool2d keeps a NaN and
/// its index) and the fused conv2d_max_pool2d's index do. `x == m` alone sent it nowhere.
LOCKSTEP_HOST_DEVICE constexpr bool gave_max(float x, float m) { return x == m || (x != x && m != m); }
/// clip(u, lo, hi)'s gradient: g unless u is outside [lo, hi] (TensorFlow's clip_by_value
/// gradient, which a NaN passes).
LOCKSTEP_HOST_DEVICE constexpr float clip_grad_of(float u, float g, float lo, float hi) {
  return u < lo || u > hi ? 0.0f : g;
}
/// Several float32 variables' updates in one launch (multi-tensor apply): variable j's weights
/// w[j], slots m[j], v[j] and a[j] (null where the rule has none; RMSprop's momentum, velocity and
/// average gradient) and gradient g[j], of n[j] elements. A value: CUDA's launch carries it in
/// the kernel's parameters, a capture's recording copies it.
struct MultiUpdateDesc {
  static constexpr int kMax = 32;  // 1.5 KB of parameters (CUDA takes 4 KB)
  int count = 0;
  void* w[kMax] = {};
  void* m[kMax] = {};
  void* v[kMax] = {};
  void* a[kMax] = {};
  const void* g[kMax] = {};
  std::int64_t n[kMax] = {};
};
using step_state::StepBlock;
using step_state::StepRule;
using step_state::StepScalars;
using clip_math::NormClip;
using loss_scale_math::LossScaleState;

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

/// Scaled dot-product attention over q [b, h, tq, d], k [b, h, tk, d], v [b, h, tk, dv] (out
/// [b, h, tq, dv]): score s = scale * q . k, masked scores replaced by -1e9 (Keras' large negative:
/// a row with nothing to attend to averages every value), softmax over keys, dropout on the
/// probabilities keyed as the dropout kernel keys an example's unit (h * tq + i) * tk + j.
/// heads_last: q, k, v, out and their gradients are [b, t, h, width] instead (a projection's
/// output as it comes, no transpose); row i of head (e, head) is at ((e * t + i) * h + head) *
/// width, rows h * width apart. lse stays [b, h, tq].
struct AttentionDesc {
  std::int64_t b = 0, h = 0, tq = 0, tk = 0, d = 0, dv = 0;
  bool heads_last = false;
  float scale = 1;
  bool causal = false;  // key j is masked for query i when j > i (Keras' use_causal_mask)
  /// mask (uint8, 1 = attend; null for none) element of (batch e, query i, key j):
  /// mask[e * mask_b_stride + i * mask_q_stride + j].
  std::int64_t mask_b_stride = 0, mask_q_stride = 0;
  float dropout_rate = 0;
  std::uint64_t seed = 0, stream = 0, step = 0;
  const std::int64_t* step_at = nullptr;  // not null: the step is the count there (the dropout kernel's step_at)
  std::int64_t first_example = 0;
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
/// Output (oy, ox)'s pooling window: its rows [y0, y1) and columns [x0, x1) inside the input (the
/// padding cut off). One rule for the CPU's loops and CUDA's per-element kernels (window_math.hpp).
struct PoolWindow {
  std::int64_t y0, y1, x0, x1;
};
LOCKSTEP_HOST_DEVICE inline PoolWindow pool_window(const Pool2dDesc& d, std::int64_t oy, std::int64_t ox) {
  const std::int64_t ty = oy * d.stride_h - d.pad_top, tx = ox * d.stride_w - d.pad_left;
  return {ty > 0 ? ty : 0, ty + d.kh < d.h ? ty + d.kh : d.h, tx > 0 ? tx : 0, tx + d.kw < d.w ? tx + d.kw : d.w};
}

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

/// One enumerator per row of the op list, for supports() and error messages.
enum class KernelOp : std::uint8_t {
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) Op,
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
  kCount
};
const char* kernel_op_name(KernelOp op);

/// The dtypes an op's row names (kernel_ops.def's third column).
enum class KernelDTypes : std::uint8_t { kAny, kFloating, kInteger, kF32 };
template <typename T>
constexpr bool holds(KernelDTypes d) {
  constexpr bool floating = std::is_same_v<T, float> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
  switch (d) {
    case KernelDTypes::kAny: return true;
    case KernelDTypes::kFloating: return floating;
    case KernelDTypes::kInteger: return !floating;
    case KernelDTypes::kF32: return std::is_same_v<T, float>;
  }
  return false;
}

/// A backend's kernels for one dtype: a field per row of the op list, null where the backend
/// has no kernel for that dtype.
struct KernelTable {
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) ret(*name) params = nullptr;
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
};

/// What a backend has, as build_table (backend_kernels.inc) asks it: a backend's traits derive
/// from this and say only what differs. built: the kernel is compiled into the backend
/// (constexpr, so a kernel it lacks is never named); enabled: the kernel is wanted in this process.
struct AllKernels {
  static constexpr bool built(KernelOp) { return true; }
  /// For storage type T, of the dtypes the op's row names (the most any backend has).
  template <typename T>
  static constexpr bool built_as(KernelOp) { return true; }
  static bool enabled(KernelOp) { return true; }
};
/// The fused convolution + max pooling kernels (optional in every backend).
constexpr bool fused_conv_pool(KernelOp op) {
  return op == KernelOp::kConv2dMaxPool2d || op == KernelOp::kConv2dMaxPool2dBackwardWeights ||
         op == KernelOp::kMaxUnpool2d;
}

/// The convolution's own kernels: their rows name the floating dtypes (cuDNN has 16-bit ones); a
/// backend without them has float32's only, and the ops widen 16-bit tensors for it.
constexpr bool convolution(KernelOp op) {
  return op == KernelOp::kConv2d || op == KernelOp::kConv2dBackwardData || op == KernelOp::kConv2dBackwardWeights;
}

// Explicit instantiations of a backend's kernel templates, for its kernel files to expand in its
// namespace: LOCKSTEP_INSTANTIATE_KERNEL(Floating, gemm) instantiates gemm for the dtypes its row
// names, with the signature the op list declared (decltype of the declaration).
#define LOCKSTEP_INSTANTIATE_KERNEL(dtypes, name) LOCKSTEP_INSTANTIATE_KERNEL_##dtypes(name)
#define LOCKSTEP_INSTANTIATE_KERNEL_AS(name, T) template decltype(name<T>) name<T>;
#define LOCKSTEP_INSTANTIATE_KERNEL_Floating(name)                                          \
  LOCKSTEP_INSTANTIATE_KERNEL_AS(name, float) LOCKSTEP_INSTANTIATE_KERNEL_AS(name, Float16) \
  LOCKSTEP_INSTANTIATE_KERNEL_AS(name, BFloat16)
#define LOCKSTEP_INSTANTIATE_KERNEL_Integer(name)                                                          \
  LOCKSTEP_INSTANTIATE_KERNEL_AS(name, std::int32_t) LOCKSTEP_INSTANTIATE_KERNEL_AS(name, std::int64_t) \
  LOCKSTEP_INSTANTIATE_KERNEL_AS(name, std::uint8_t)
#define LOCKSTEP_INSTANTIATE_KERNEL_Any(name) \
  LOCKSTEP_INSTANTIATE_KERNEL_Floating(name) LOCKSTEP_INSTANTIATE_KERNEL_Integer(name)

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
  /// Moves the context to stream `stream` of its device (0: the stream every context of the
  /// device shares; logical replicas of one GPU each take one of their own while a strategy runs
  /// a step), its work from now on queued there after the work it queued so far (an event, no
  /// host wait). Null where a device has one queue.
  void (*use_stream)(ComputeContext&, int stream) = nullptr;
  /// Host memory the device writes and the host reads without a copy (pinned and mapped on a
  /// GPU), never freed: the device's error marks (error_marks.hpp). Null: plain host memory.
  void* (*alloc_host_mapped)(std::size_t bytes) = nullptr;
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
