// Elementwise kernels: unary ops and their gradients, broadcasting binary ops, the fused
// bias + ReLU and scale-and-clip. float32 arithmetic for every floating dtype; the math
// functions are CUDA's (expf, erff, ...: within a few ulps of the CPU's libm, which the
// parity tolerances allow).
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"

namespace lockstep::backend::cuda {

namespace {
// gelu: p0 != 0 is the tanh approximation (Keras' approximate=True), else the exact erf form.
__device__ inline float gelu_f(float x, float approximate) {
  if (approximate != 0.0f) {
    const float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * x * (1.0f + t);
  }
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
__device__ inline float gelu_grad_f(float x, float approximate) {
  if (approximate != 0.0f) {
    const float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 0.134145f * x * x);
  }
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  const float pdf = 0.3989422804014327f * expf(-0.5f * x * x);
  return cdf + x * pdf;
}
__device__ inline float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ inline float unary_f(UnaryOp op, float v, float p0, float p1) {
  switch (op) {
    case UnaryOp::kNeg: return -v;
    case UnaryOp::kExp: return expf(v);
    case UnaryOp::kLog: return logf(v);
    case UnaryOp::kSqrt: return sqrtf(v);
    case UnaryOp::kSquare: return v * v;
    case UnaryOp::kAbs: return fabsf(v);
    case UnaryOp::kRelu: return relu_of(v);
    case UnaryOp::kSigmoid: return 1.0f / (1.0f + expf(-v));
    case UnaryOp::kTanh: return tanhf(v);
    case UnaryOp::kGelu: return gelu_f(v, p0);
    case UnaryOp::kScale: return v * p0;
    case UnaryOp::kAddScalar: return v + p0;
    case UnaryOp::kPowScalar: return powf(v, p0);
    case UnaryOp::kClip: {  // std::min(std::max(v, lo), hi), as on the CPU: NaN stays NaN
      const float m = v < p0 ? p0 : v;
      return p1 < m ? p1 : m;
    }
    case UnaryOp::kSilu: return v * sigmoid_f(v);
  }
  return v;
}

__device__ inline float unary_grad_f(UnaryOp op, float u, float v, float g, float p0, float p1) {
  switch (op) {
    case UnaryOp::kNeg: return -g;
    case UnaryOp::kExp: return g * v;
    case UnaryOp::kLog: return g / u;
    case UnaryOp::kSqrt: return g * 0.5f / v;
    case UnaryOp::kSquare: return g * 2.0f * u;
    case UnaryOp::kAbs: return u > 0.0f ? g : (u < 0.0f ? -g : 0.0f);
    case UnaryOp::kRelu: return u > 0.0f ? g : 0.0f;
    case UnaryOp::kSigmoid: return g * v * (1.0f - v);
    case UnaryOp::kTanh: return g * (1.0f - v * v);
    case UnaryOp::kGelu: return g * gelu_grad_f(u, p0);
    case UnaryOp::kScale: return g * p0;
    case UnaryOp::kAddScalar: return g;
    case UnaryOp::kPowScalar: return g * p0 * powf(u, p0 - 1.0f);
    case UnaryOp::kClip: return clip_grad_of(u, g, p0, p1);
    case UnaryOp::kSilu: {
      const float s = sigmoid_f(u);
      return g * s * (1.0f + u * (1.0f - s));
    }
  }
  return g;
}

template <typename F>
__global__ void unary_kernel(UnaryOp op, const F* x, F* y, std::int64_t n, float p0, float p1) {
  LOCKSTEP_GRID_LOOP(i, n) y[i] = Elem<F>::store(unary_f(op, Elem<F>::load(x[i]), p0, p1));
}

template <typename F>
__global__ void unary_backward_kernel(UnaryOp op, const F* x, const F* y, const F* dy, F* dx, std::int64_t n, float p0,
                                      float p1) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(i, n) {
    // Only the ops whose gradient reads x or y touch them (the tensor layer may pass null).
    const float u = x ? E::load(x[i]) : 0.0f;
    const float v = y ? E::load(y[i]) : 0.0f;
    dx[i] = E::store(unary_grad_f(op, u, v, E::load(dy[i]), p0, p1));
  }
}

__device__ inline float binary_f(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMaximum: return max_of(a, b);
    case BinaryOp::kMinimum: return min_of(a, b);
  }
  return a;
}

template <typename F>
__global__ void binary_kernel(BinaryOp op, BroadcastDesc d, BcastKind kind, const F* a, const F* b, F* out,
                              std::int64_t n) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(i, n) {
    std::int64_t ao, bo;
    bcast_offsets(d, kind, i, &ao, &bo);
    out[i] = E::store(binary_f(op, E::load(a[ao]), E::load(b[bo])));
  }
}

template <typename F>
__global__ void where_kernel(WhereDesc w, const std::uint8_t* cond, const F* a, const F* b, F* out, std::int64_t n) {
  LOCKSTEP_GRID_LOOP(i, n) {
    std::int64_t ao = 0, bo = 0, co = 0, rem = i;
    for (int k = w.ab.rank - 1; k >= 0; --k) {
      const std::int64_t idx = rem % w.ab.dims[k];
      rem /= w.ab.dims[k];
      ao += idx * w.ab.a_strides[k];
      bo += idx * w.ab.b_strides[k];
      co += idx * w.cond_strides[k];
    }
    out[i] = cond[co] != 0 ? a[ao] : b[bo];
  }
}

template <typename F>
__global__ void bias_activation_kernel(F* y, const F* bias, std::int64_t rows, std::int64_t cols, bool relu) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(i, rows * cols) {
    float v = E::load(y[i]);
    if (bias) v += E::load(bias[i % cols]);
    if (relu) v = relu_of(v);
    y[i] = E::store(v);
  }
}

template <typename F>
__global__ void scale_clip_kernel(const F* x, F* y, std::int64_t n, float scale, float clip) {
  LOCKSTEP_GRID_LOOP(i, n) {
    // Comparisons, not fminf/fmaxf: a NaN stays NaN (as on the CPU, and tf.clip_by_value).
    const float v = Elem<F>::load(x[i]) * scale;
    y[i] = Elem<F>::store(v < -clip ? -clip : v > clip ? clip : v);
  }
}
}  // namespace

template <typename F>
void unary(ComputeContext& ctx, UnaryOp op, const void* x, void* y, std::int64_t n, float p0, float p1) {
  if (n == 0) return;
  unary_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(op, static_cast<const F*>(x), static_cast<F*>(y), n, p0,
                                                              p1);
  check_launch("unary");
}

template <typename F>
void unary_backward(ComputeContext& ctx, UnaryOp op, const void* x, const void* y, const void* dy, void* dx,
                    std::int64_t n, float p0, float p1) {
  if (n == 0) return;
  unary_backward_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      op, static_cast<const F*>(x), static_cast<const F*>(y), static_cast<const F*>(dy), static_cast<F*>(dx), n, p0, p1);
  check_launch("unary_backward");
}

template <typename F>
void binary(ComputeContext& ctx, BinaryOp op, const BroadcastDesc& d, const void* a, const void* b, void* out) {
  std::int64_t n = 0;
  const BcastKind kind = bcast_kind(d, &n);
  if (n == 0) return;
  binary_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(op, d, kind, static_cast<const F*>(a),
                                                               static_cast<const F*>(b), static_cast<F*>(out), n);
  check_launch("binary");
}

template <typename F>
void where(ComputeContext& ctx, const WhereDesc& w, const std::uint8_t* cond, const void* a, const void* b,
           void* out) {
  std::int64_t n = 1;
  for (int k = 0; k < w.ab.rank; ++k) n *= w.ab.dims[k];
  if (n == 0) return;
  where_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(w, cond, static_cast<const F*>(a),
                                                               static_cast<const F*>(b), static_cast<F*>(out), n);
  check_launch("where");
}

template <typename F>
void bias_activation(ComputeContext& ctx, void* y, const void* bias, std::int64_t rows, std::int64_t cols, bool relu) {
  if (rows * cols == 0 || (!bias && !relu)) return;
  bias_activation_kernel<F><<<blocks_for(rows * cols), kThreads, 0, stream(ctx)>>>(
      static_cast<F*>(y), static_cast<const F*>(bias), rows, cols, relu);
  check_launch("bias_activation");
}

template <typename F>
void scale_clip(ComputeContext& ctx, const void* x, void* y, std::int64_t n, float scale, float clip) {
  if (n == 0) return;
  scale_clip_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<const F*>(x), static_cast<F*>(y), n,
                                                                   scale, clip);
  check_launch("scale_clip");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, unary)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, unary_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, binary)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, where)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, bias_activation)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, scale_clip)

}  // namespace lockstep::backend::cuda
