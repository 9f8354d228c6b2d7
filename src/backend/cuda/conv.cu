// Convolution through cuDNN (its convolution API: forward, backward data, backward filter) on
// NHWC activations: float32, and float16 / bfloat16 with float32 accumulation (cuDNN's
// PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG: 16-bit x, w, y descriptors, a float32 convolution
// descriptor). What lockstep's semantics need around it:
//   * Keras' kernels are HWIO ([kh, kw, c / groups, oc]); cuDNN's NHWC filters are KRSC
//     ([oc, kh, kw, c / groups]), so the kernel is transposed on the way in and the kernel
//     gradient on the way out (a [kh kw c/g, oc] matrix transpose: weights are small).
//   * cuDNN pads symmetrically; Keras' "same" with a stride may pad one more row or column at
//     the bottom / right. Where cuDNN's symmetric padding (top, left) gives other output sizes
//     than the descriptor's, the input is padded explicitly into scratch (and the input gradient
//     cropped from it).
//   * The bias and the fused ReLU are lockstep's bias_activation kernel after cuDNN's forward
//     (NHWC: the bias is a row vector); the bias gradient is reduce_sum's fixed-tree column sums.
//     16-bit: the bias is written into y first and cuDNN blends it (beta = 1) into its float32
//     result before its one rounding, as the widened float32 path rounds once (scaling factors
//     are float for 16-bit data; that the blend precedes the rounding is what the parity rows'
//     bias cases check on a GPU).
//   * 16-bit math: CUDNN_TENSOR_OP_MATH (tensor cores allowed; PyTorch's choice for half too):
//     asked before the heuristic, it ranks tensor-core and other algorithms together. Where cuDNN
//     has no algorithm for a 16-bit configuration (the heuristic gives none, or every one is
//     refused), the call widens to float32 scratch and runs float32's plan (Widened, in the
//     entry points below: the one place that decides it): slower, never an error, and the plan
//     remembers it. FFT and Winograd algorithms are left out for 16-bit (transform_free).
//   * Algorithms come from cuDNN's heuristics (not a timed search, which may pick another
//     algorithm on the next run), deterministic ones with FMA math unless TF32 is allowed (the
//     same rule as GEMM: LOCKSTEP_CUDA_TF32=1) wherever cuDNN has one: the same bits on every run.
// A plan (descriptors, algorithms, workspace sizes) is made once per shape, dtype and device and kept.
// cuDNN handles: one per lane of a GPU (the stream a logical replica computes on), bound to its
// stream; the plans are the device's, so calls take one lock (they only enqueue).
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/window_math.hpp"

namespace lockstep::backend::cuda {

namespace {
void check_dnn(cudnnStatus_t s, const char* what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  throw InternalError(std::string("cuDNN error in ") + what + ": " + cudnnGetErrorString(s) + " (status " +
                      std::to_string(static_cast<int>(s)) + ")");
}

// ---- layout kernels: element moves, so over the storage's bits (E{}: +0 in every float format) ----
template <typename T>
using Bits = std::conditional_t<std::is_same_v<T, float>, float, std::uint16_t>;

// dst [cols, rows] = src [rows, cols]^T.
template <typename E>
__global__ void transpose_kernel(const E* src, E* dst, std::int64_t rows, std::int64_t cols) {
  LOCKSTEP_GRID_LOOP(i, rows * cols) dst[i] = src[window::transpose_source(i, rows, cols)];
}
template <typename T>
void transpose(cudaStream_t s, const void* src, void* dst, std::int64_t rows, std::int64_t cols) {
  using E = Bits<T>;
  transpose_kernel<E><<<blocks_for(rows * cols), kThreads, 0, s>>>(static_cast<const E*>(src), static_cast<E*>(dst),
                                                                   rows, cols);
  check_launch("conv2d (kernel transpose)");
}

// dst[n, y, x, c] = src[n, y + oy, x + ox, c] inside src, else 0: pads (oy, ox < 0) or crops.
template <typename E>
__global__ void window_copy_kernel(const E* src, std::int64_t sh, std::int64_t sw, E* dst, std::int64_t n,
                                   std::int64_t dh, std::int64_t dw, std::int64_t c, std::int64_t oy,
                                   std::int64_t ox) {
  LOCKSTEP_GRID_LOOP(i, n * dh * dw * c) {
    const std::int64_t from = window::window_copy_source(i, sh, sw, dh, dw, c, oy, ox);
    dst[i] = from >= 0 ? src[from] : E{};
  }
}
template <typename T>
void window_copy(cudaStream_t s, const void* src, std::int64_t sh, std::int64_t sw, void* dst, std::int64_t n,
                 std::int64_t dh, std::int64_t dw, std::int64_t c, std::int64_t oy, std::int64_t ox, const char* what) {
  using E = Bits<T>;
  window_copy_kernel<E><<<blocks_for(n * dh * dw * c), kThreads, 0, s>>>(static_cast<const E*>(src), sh, sw,
                                                                         static_cast<E*>(dst), n, dh, dw, c, oy, ox);
  check_launch(what);
}

// y[r, c] = bias[c]: the prior value cuDNN's 16-bit forward blends its result into.
template <typename E>
__global__ void bias_rows_kernel(const E* bias, E* y, std::int64_t rows, std::int64_t cols) {
  LOCKSTEP_GRID_LOOP(i, rows * cols) y[i] = bias[i % cols];
}

// ---- plans ----
using Key = std::array<std::int64_t, 19>;
Key key_of(const Conv2dDesc& d, DType dt) {
  return {d.n, d.h, d.w, d.c, d.oh, d.ow, d.oc, d.kh, d.kw, d.stride_h, d.stride_w, d.dilation_h, d.dilation_w,
          d.pad_top, d.pad_left, d.pad_bottom, d.pad_right, d.groups, static_cast<std::int64_t>(dt)};
}
cudnnDataType_t dnn_type(DType dt) {
  return dt == DType::kF16 ? CUDNN_DATA_HALF : dt == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

template <typename Perf>
struct Candidates {
  std::vector<Perf> list;  // usable algorithms, best first
  std::size_t next = 0;    // the one in use
  bool none = false;       // 16-bit: cuDNN has no usable algorithm; the call widens to float32
  const Perf& current() const { return list[next]; }
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool explicit_pad = false;  // x is padded into scratch first (hp x wp)
  std::int64_t hp = 0, wp = 0;
  // Chosen on a direction's first call (an empty list: not yet; choose never leaves one empty).
  Candidates<cudnnConvolutionFwdAlgoPerf_t> fwd;
  Candidates<cudnnConvolutionBwdDataAlgoPerf_t> bwd_data;
  Candidates<cudnnConvolutionBwdFilterAlgoPerf_t> bwd_filter;
};

// A workspace larger than this is not worth it (a logical device may have little memory).
constexpr std::size_t kMaxWorkspace = std::size_t{256} << 20;

struct DnnState {
  // One handle per lane, made on its first convolution and bound to its stream: the lanes of a
  // GPU run at once, and a handle's internal resources (cudnnSetStream: its internal streams)
  // serve one stream (cuDNN's thread-safety notes: a handle per thread).
  cudnnHandle_t handles[CudaDevice::kMaxLanes] = {};
  std::map<Key, std::unique_ptr<Plan>> plans;  // every lane's, kept for the process like the GEMM plans
};
std::mutex g_dnn_mu;                        // guards g_dnn, the plans and every use of a handle
std::array<DnnState*, 64> g_dnn{};          // per GPU index, leaked with the device

// float32: FMA unless TF32 is allowed; 16-bit: tensor cores (their products are exact in float32,
// which accumulates).
cudnnMathType_t math_type(DType dt) {
  if (dt != DType::kF32) return CUDNN_TENSOR_OP_MATH;
  return tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

int narrow(std::int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw ValueError(std::string("conv2d on the GPU: ") + what + " = " + std::to_string(v) +
                     " does not fit cuDNN's int dimensions");
  return static_cast<int>(v);
}

// The state of `lane`'s GPU, and the lane's handle, queueing on its stream.
struct DnnLane {
  DnnState& state;
  cudnnHandle_t handle;
};
DnnLane dnn_state(CudaLane& lane) {  // g_dnn_mu held
  DnnState*& s = g_dnn[static_cast<std::size_t>(lane.device->index)];
  if (!s) s = new DnnState;
  cudnnHandle_t& h = s->handles[lane.index];
  if (!h) {
    cudnnHandle_t made = nullptr;
    check_dnn(cudnnCreate(&made), "cudnnCreate");
    check_dnn(cudnnSetStream(made, lane.stream), "cudnnSetStream");
    h = made;
  }
  return {*s, h};
}

Plan& plan_for(DnnState& st, const Conv2dDesc& d, DType dt) {  // g_dnn_mu held
  auto& slot = st.plans[key_of(d, dt)];
  const cudnnDataType_t type = dnn_type(dt);
  if (slot) return *slot;
  auto p = std::make_unique<Plan>();
  check_dnn(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
  check_dnn(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor");
  const int cg = narrow(d.c / d.groups, "input channels per group");
  check_dnn(cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NHWC, narrow(d.oc, "output channels"), cg,
                                       narrow(d.kh, "kernel height"), narrow(d.kw, "kernel width")),
            "cudnnSetFilter4dDescriptor");
  check_dnn(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, type, narrow(d.n, "batch"),
                                       narrow(d.oc, "output channels"), narrow(d.oh, "output height"),
                                       narrow(d.ow, "output width")),
            "cudnnSetTensor4dDescriptor");
  // First try cuDNN's own (symmetric) padding; fall back to padding explicitly when the output
  // sizes differ from the descriptor's (padding past the last window never matters).
  for (int attempt = 0; attempt < 2; ++attempt) {
    p->explicit_pad = attempt == 1;
    p->hp = p->explicit_pad ? d.h + d.pad_top + d.pad_bottom : d.h;
    p->wp = p->explicit_pad ? d.w + d.pad_left + d.pad_right : d.w;
    const int pad_h = p->explicit_pad ? 0 : narrow(d.pad_top, "padding"),
              pad_w = p->explicit_pad ? 0 : narrow(d.pad_left, "padding");
    check_dnn(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, type, narrow(d.n, "batch"),
                                         narrow(d.c, "channels"), narrow(p->hp, "height"), narrow(p->wp, "width")),
              "cudnnSetTensor4dDescriptor");
    check_dnn(cudnnSetConvolution2dDescriptor(p->conv, pad_h, pad_w, narrow(d.stride_h, "stride"),
                                              narrow(d.stride_w, "stride"), narrow(d.dilation_h, "dilation"),
                                              narrow(d.dilation_w, "dilation"), CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT),  // float32 accumulation for every dtype
              "cudnnSetConvolution2dDescriptor");
    check_dnn(cudnnSetConvolutionGroupCount(p->conv, narrow(d.groups, "groups")), "cudnnSetConvolutionGroupCount");
    check_dnn(cudnnSetConvolutionMathType(p->conv, math_type(dt)), "cudnnSetConvolutionMathType");
    int n = 0, c = 0, h = 0, w = 0;
    check_dnn(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &c, &h, &w),
              "cudnnGetConvolution2dForwardOutputDim");
    if (n == d.n && c == d.oc && h == d.oh && w == d.ow) break;
    if (attempt == 1)
      throw InternalError("conv2d on the GPU: cuDNN computes a " + std::to_string(h) + "x" + std::to_string(w) +
                          " output where lockstep expects " + std::to_string(d.oh) + "x" + std::to_string(d.ow));
  }
  slot = std::move(p);
  return *slot;
}

// 16-bit: the direct and GEMM-like algorithms only. FFT and Winograd transform the operands first
// and may keep the transforms in 16 bits, an error relative to the sum's terms rather than its
// result, which the widened path does not have; where cuDNN has nothing else, the call widens.
bool transform_free(cudnnConvolutionFwdAlgo_t a) {
  return a != CUDNN_CONVOLUTION_FWD_ALGO_FFT && a != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
         a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD && a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transform_free(cudnnConvolutionBwdDataAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT && a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
         a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD && a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transform_free(cudnnConvolutionBwdFilterAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT && a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING &&
         a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The usable algorithms from a heuristic's list, best first within each tier: first those with
// the math type asked for (FMA: no TF32), deterministic, a workspace within kMaxWorkspace; where
// cuDNN has none of those, non-deterministic ones (float32 accumulation still, run-to-run bits may
// differ), then other math types, then any workspace: training slower or less reproducible beats
// not training. An empty list is an error naming the shape in float32; in 16-bit it marks the
// direction `none` (the call widens).
template <typename Perf>
void choose(Candidates<Perf>& out, const Perf* perf, int returned, const Conv2dDesc& d, DType dt, const char* which) {
  const cudnnMathType_t math = math_type(dt);
  for (int tier = 0; tier < 4 && out.list.empty(); ++tier) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS || (dt != DType::kF32 && !transform_free(p.algo))) continue;
      if (tier < 3 && p.memory > kMaxWorkspace) continue;
      if (tier < 2 && p.mathType != math) continue;
      if (tier == 0 && p.determinism != CUDNN_DETERMINISTIC) continue;
      out.list.push_back(p);
    }
  }
  out.none = out.list.empty() && dt != DType::kF32;
  if (out.list.empty() && !out.none)
    throw InternalError(std::string("cuDNN has no ") + which + " algorithm for a " + std::to_string(d.kh) + "x" +
                        std::to_string(d.kw) + " convolution of " + std::to_string(d.c) + " -> " +
                        std::to_string(d.oc) + " channels (groups " + std::to_string(d.groups) + ", input " +
                        std::to_string(d.h) + "x" + std::to_string(d.w) + ", batch " + std::to_string(d.n) + ")");
}

// On a direction's first call: asks cuDNN's heuristic (get(requested, &returned, perf), one of
// the cudnnGet…Algorithm_v7 calls) for its kCount algorithms and chooses among them, the plan's
// descriptor asking for math_type() (a call before may have left another algorithm's there).
// False: cuDNN has no algorithm for this 16-bit configuration.
template <int kCount, typename Perf, typename Get>
bool ensure_chosen(Candidates<Perf>& c, cudnnConvolutionDescriptor_t conv, const Conv2dDesc& d, DType dt,
                   const char* which, const char* api, Get&& get) {
  if (c.none) return false;
  if (!c.list.empty()) return true;
  check_dnn(cudnnSetConvolutionMathType(conv, math_type(dt)), "cudnnSetConvolutionMathType");
  Perf perf[kCount];
  int returned = 0;
  check_dnn(get(kCount, &returned, perf), api);
  choose(c, perf, returned, d, dt, which);
  return !c.none;
}

// Runs call(algorithm, workspace, bytes) with the plan's current algorithm, the descriptor set to
// the math type the heuristic gave with it: cuDNN picks an algorithm's kernels by both (since cuDNN
// 7.4; PyTorch sets it so before each call), which matters where choose() fell back to another
// math type. An algorithm cuDNN then refuses (NOT_SUPPORTED despite the heuristic) is dropped for
// the next one; when a 16-bit call has none left, the direction is marked `none` and false returned.
template <typename Perf, typename Call>
bool run_with(ComputeContext& ctx, cudnnConvolutionDescriptor_t conv, Candidates<Perf>& c, DType dt,
              const char* what, Call&& call) {
  for (;;) {
    const Perf& p = c.current();
    check_dnn(cudnnSetConvolutionMathType(conv, p.mathType), "cudnnSetConvolutionMathType");
    Scratch ws(ctx, p.memory ? p.memory : 1);
    const cudnnStatus_t s = call(p.algo, p.memory ? ws.as<void>() : nullptr, p.memory);
    if (s == CUDNN_STATUS_NOT_SUPPORTED && c.next + 1 < c.list.size()) {
      ++c.next;
      continue;
    }
    if (s == CUDNN_STATUS_NOT_SUPPORTED && dt != DType::kF32) {
      c.none = true;
      return false;
    }
    check_dnn(s, what);
    return true;
  }
}

// A direction's call: its algorithms chosen on its first call (ensure_chosen), then run (run_with).
// False: cuDNN has no algorithm for this 16-bit configuration.
template <int kCount, typename Perf, typename Get, typename Call>
bool choose_and_run(ComputeContext& ctx, cudnnConvolutionDescriptor_t conv, Candidates<Perf>& c,
                    const Conv2dDesc& d, DType dt, const char* which, const char* get_api, Get&& get,
                    const char* call_api, Call&& call) {
  return ensure_chosen<kCount>(c, conv, d, dt, which, get_api, get) && run_with(ctx, conv, c, dt, call_api, call);
}

// Rows of the HWIO kernel matrix ([kh kw c/g, oc]).
std::int64_t kernel_rows(const Conv2dDesc& d) { return d.kh * d.kw * (d.c / d.groups); }

// The HWIO kernel w as cuDNN's KRSC, in scratch.
template <typename T>
std::unique_ptr<Scratch> krsc_kernel(ComputeContext& ctx, cudaStream_t s, const Conv2dDesc& d, const void* w) {
  const std::int64_t kn = kernel_rows(d);
  auto out = std::make_unique<Scratch>(ctx, static_cast<std::size_t>(kn * d.oc) * sizeof(T));
  transpose<T>(s, w, out->as<void>(), kn, d.oc);
  return out;
}

// x padded explicitly into scratch where the plan says so (else null: cuDNN pads).
template <typename T>
std::unique_ptr<Scratch> padded_input(ComputeContext& ctx, cudaStream_t s, const Conv2dDesc& d, const Plan& p,
                                      const void* x) {
  if (!p.explicit_pad) return nullptr;
  const std::int64_t n = d.n * p.hp * p.wp * d.c;
  auto padded = std::make_unique<Scratch>(ctx, static_cast<std::size_t>(n) * sizeof(T));
  window_copy<T>(s, x, d.h, d.w, padded->as<void>(), d.n, p.hp, p.wp, d.c, -d.pad_top, -d.pad_left,
                 "conv2d (padding)");
  return padded;
}

struct Locked {
  std::lock_guard<std::mutex> lock{g_dnn_mu};
};

// ---- cuDNN's calls, one per direction, in the tensors' own dtype T; false: a 16-bit
// configuration cuDNN has no algorithm for (the entry points then widen) ----
template <typename T>
bool dnn_forward(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* w, const void* bias, void* y) {
  constexpr DType dt = dtype_of_v<T>;
  CudaLane& dev = lane(ctx);
  const std::unique_ptr<Scratch> w_krsc = krsc_kernel<T>(ctx, dev.stream, d, w);
  // 16-bit: y starts as the bias and cuDNN adds its float32 result to it before rounding (beta = 1).
  const bool blend = dt != DType::kF32 && bias;
  if (blend) {
    using E = Bits<T>;
    bias_rows_kernel<E><<<blocks_for(d.n * d.oh * d.ow * d.oc), kThreads, 0, dev.stream>>>(
        static_cast<const E*>(bias), static_cast<E*>(y), d.n * d.oh * d.ow, d.oc);
    check_launch("conv2d (bias)");
  }
  {
    Locked locked;
    const DnnLane st = dnn_state(dev);
    Plan& p = plan_for(st.state, d, dt);
    const std::unique_ptr<Scratch> padded = padded_input<T>(ctx, dev.stream, d, p, x);
    const void* src = padded ? padded->as<void>() : x;
    const float one = 1.0f, beta = blend ? 1.0f : 0.0f;  // float scaling factors for every dtype here
    if (!choose_and_run<CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
            ctx, p.conv, p.fwd, d, dt, "forward", "cudnnGetConvolutionForwardAlgorithm_v7",
            [&](int n, int* r, auto* perf) {
              return cudnnGetConvolutionForwardAlgorithm_v7(st.handle, p.x, p.w, p.conv, p.y, n, r, perf);
            },
            "cudnnConvolutionForward", [&](cudnnConvolutionFwdAlgo_t algo, void* ws, std::size_t bytes) {
              return cudnnConvolutionForward(st.handle, &one, p.x, src, p.w, w_krsc->as<void>(), p.conv, algo, ws,
                                             bytes, &beta, p.y, y);
            }))
      return false;
  }
  bias_activation<T>(ctx, y, blend ? nullptr : bias, d.n * d.oh * d.ow, d.oc, d.relu);
  return true;
}

template <typename T>
bool dnn_backward_data(ComputeContext& ctx, const Conv2dDesc& d, const void* w, const void* dy, void* dx) {
  constexpr DType dt = dtype_of_v<T>;
  CudaLane& dev = lane(ctx);
  const std::unique_ptr<Scratch> w_krsc = krsc_kernel<T>(ctx, dev.stream, d, w);
  Locked locked;
  const DnnLane st = dnn_state(dev);
  Plan& p = plan_for(st.state, d, dt);
  void* dst = dx;
  std::unique_ptr<Scratch> padded;
  if (p.explicit_pad) {
    padded = std::make_unique<Scratch>(ctx, static_cast<std::size_t>(d.n * p.hp * p.wp * d.c) * sizeof(T));
    dst = padded->as<void>();
  }
  const float one = 1.0f, zero = 0.0f;
  if (!choose_and_run<CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
          ctx, p.conv, p.bwd_data, d, dt, "backward-data", "cudnnGetConvolutionBackwardDataAlgorithm_v7",
          [&](int n, int* r, auto* perf) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(st.handle, p.w, p.y, p.conv, p.x, n, r, perf);
          },
          "cudnnConvolutionBackwardData", [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, std::size_t bytes) {
            return cudnnConvolutionBackwardData(st.handle, &one, p.w, w_krsc->as<void>(), p.y, dy, p.conv, algo, ws,
                                                bytes, &zero, p.x, dst);
          }))
    return false;
  if (p.explicit_pad)  // the input's gradient is the padded one's interior
    window_copy<T>(dev.stream, dst, p.hp, p.wp, dx, d.n, d.h, d.w, d.c, d.pad_top, d.pad_left,
                   "conv2d_backward_data (crop)");
  return true;
}

template <typename T>
bool dnn_backward_weights(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* dy, void* dw,
                          void* db) {
  constexpr DType dt = dtype_of_v<T>;
  CudaLane& dev = lane(ctx);
  const std::int64_t kn = kernel_rows(d);
  Scratch dw_krsc(ctx, static_cast<std::size_t>(kn * d.oc) * sizeof(T));
  {
    Locked locked;
    const DnnLane st = dnn_state(dev);
    Plan& p = plan_for(st.state, d, dt);
    const std::unique_ptr<Scratch> padded = padded_input<T>(ctx, dev.stream, d, p, x);
    const void* src = padded ? padded->as<void>() : x;
    const float one = 1.0f, zero = 0.0f;
    if (!choose_and_run<CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
            ctx, p.conv, p.bwd_filter, d, dt, "backward-filter", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
            [&](int n, int* r, auto* perf) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(st.handle, p.x, p.y, p.conv, p.w, n, r, perf);
            },
            "cudnnConvolutionBackwardFilter", [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, std::size_t bytes) {
              return cudnnConvolutionBackwardFilter(st.handle, &one, p.x, src, p.y, dy, p.conv, algo, ws, bytes, &zero,
                                                    p.w, dw_krsc.as<void>());
            }))
      return false;
  }
  transpose<T>(dev.stream, dw_krsc.as<void>(), dw, d.oc, kn);
  if (db) reduce_sum<T>(ctx, dy, db, 1, d.n * d.oh * d.ow, d.oc, 1.0f);
  return true;
}

// ---- the widened path: a 16-bit call cuDNN has no algorithm for runs float32's on scratch
// copies (cast exactly), its results rounded once into the 16-bit outputs ----
template <typename T>
class Widened {
 public:
  explicit Widened(ComputeContext& ctx) : ctx_(ctx) {}
  /// A float32 copy of n elements of src (null stays null).
  const float* in(const void* src, std::int64_t n) {
    if (!src) return nullptr;
    float* f = scratch(n);
    cast<T>(ctx_, src, DType::kF32, f, n);
    return f;
  }
  /// float32 scratch for an output of n elements that done() rounds into dst (null: none).
  float* out(void* dst, std::int64_t n) {
    if (!dst) return nullptr;
    float* f = scratch(n);
    outs_.push_back({f, dst, n});
    return f;
  }
  void done() {
    for (const Out& o : outs_) cast<float>(ctx_, o.f, dtype_of_v<T>, o.dst, o.n);
  }

 private:
  struct Out {
    const float* f;
    void* dst;
    std::int64_t n;
  };
  float* scratch(std::int64_t n) {
    held_.push_back(std::make_unique<Scratch>(ctx_, static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * 4));
    return held_.back()->as<float>();
  }
  ComputeContext& ctx_;
  std::vector<std::unique_ptr<Scratch>> held_;
  std::vector<Out> outs_;
};
}  // namespace

std::string cudnn_version() {
  const auto v = [](std::size_t n) {
    // cuDNN 9 numbers versions major * 10000 + minor * 100 + patch.
    return std::to_string(n / 10000) + "." + std::to_string(n / 100 % 100) + "." + std::to_string(n % 100);
  };
  return v(cudnnGetVersion()) + " (built with " + v(CUDNN_VERSION) + ")";
}

template <typename T>
void conv2d(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* w, const void* bias, void* y) {
  if (d.n * d.oh * d.ow * d.oc == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    dnn_forward<float>(ctx, d, x, w, bias, y);
  } else if (!dnn_forward<T>(ctx, d, x, w, bias, y)) {
    Widened<T> f(ctx);
    const float *xf = f.in(x, d.n * d.h * d.w * d.c), *wf = f.in(w, kernel_rows(d) * d.oc), *bf = f.in(bias, d.oc);
    conv2d<float>(ctx, d, xf, wf, bf, f.out(y, d.n * d.oh * d.ow * d.oc));
    f.done();
  }
}

template <typename T>
void conv2d_backward_data(ComputeContext& ctx, const Conv2dDesc& d, const void* w, const void* dy, void* dx) {
  if (d.n * d.h * d.w * d.c == 0) return;
  if (d.oh * d.ow * d.oc == 0) {
    check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(d.n * d.h * d.w * d.c) * sizeof(T), stream(ctx)),
          "cudaMemsetAsync");
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    dnn_backward_data<float>(ctx, d, w, dy, dx);
  } else if (!dnn_backward_data<T>(ctx, d, w, dy, dx)) {
    Widened<T> f(ctx);
    const float *wf = f.in(w, kernel_rows(d) * d.oc), *dyf = f.in(dy, d.n * d.oh * d.ow * d.oc);
    conv2d_backward_data<float>(ctx, d, wf, dyf, f.out(dx, d.n * d.h * d.w * d.c));
    f.done();
  }
}

template <typename T>
void conv2d_backward_weights(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* dy, void* dw,
                             void* db) {
  const std::int64_t kn = kernel_rows(d);
  if (d.n * d.oh * d.ow == 0) {  // no terms: zero gradients
    check(cudaMemsetAsync(dw, 0, static_cast<std::size_t>(kn * d.oc) * sizeof(T), stream(ctx)), "cudaMemsetAsync");
    if (db) check(cudaMemsetAsync(db, 0, static_cast<std::size_t>(d.oc) * sizeof(T), stream(ctx)), "cudaMemsetAsync");
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    dnn_backward_weights<float>(ctx, d, x, dy, dw, db);
  } else if (!dnn_backward_weights<T>(ctx, d, x, dy, dw, db)) {
    Widened<T> f(ctx);
    const float *xf = f.in(x, d.n * d.h * d.w * d.c), *dyf = f.in(dy, d.n * d.oh * d.ow * d.oc);
    conv2d_backward_weights<float>(ctx, d, xf, dyf, f.out(dw, kn * d.oc), f.out(db, d.oc));
    f.done();
  }
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, conv2d)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, conv2d_backward_data)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, conv2d_backward_weights)

}  // namespace lockstep::backend::cuda
