// Convolution through cuDNN (its convolution API: forward, backward data, backward filter) on
// NHWC activations, float32. What lockstep's semantics need around it:
//   * Keras' kernels are HWIO ([kh, kw, c / groups, oc]); cuDNN's NHWC filters are KRSC
//     ([oc, kh, kw, c / groups]), so the kernel is transposed on the way in and the kernel
//     gradient on the way out (a [kh kw c/g, oc] matrix transpose: weights are small).
//   * cuDNN pads symmetrically; Keras' "same" with a stride may pad one more row or column at
//     the bottom / right. Where cuDNN's symmetric padding (top, left) gives other output sizes
//     than the descriptor's, the input is padded explicitly into scratch (and the input gradient
//     cropped from it).
//   * The bias and the fused ReLU are lockstep's bias_activation kernel after cuDNN's forward
//     (NHWC: the bias is a row vector); the bias gradient is reduce_sum's fixed-tree column sums.
//   * Algorithms come from cuDNN's heuristics (not a timed search, which may pick another
//     algorithm on the next run), deterministic ones with FMA math unless TF32 is allowed (the
//     same rule as GEMM: LOCKSTEP_CUDA_TF32=1) wherever cuDNN has one: the same bits on every run.
// A plan (descriptors, algorithms, workspace sizes) is made once per shape and device and kept.
// cuDNN handles: one per lane of a GPU (the stream a logical replica computes on), bound to its
// stream; the plans are the device's, so calls take one lock (they only enqueue).
#include <cudnn.h>

#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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

// ---- layout kernels ----
// dst [cols, rows] = src [rows, cols]^T.
__global__ void transpose_kernel(const float* src, float* dst, std::int64_t rows, std::int64_t cols) {
  LOCKSTEP_GRID_LOOP(i, rows * cols) dst[i] = src[window::transpose_source(i, rows, cols)];
}
void transpose(cudaStream_t s, const float* src, float* dst, std::int64_t rows, std::int64_t cols) {
  transpose_kernel<<<blocks_for(rows * cols), kThreads, 0, s>>>(src, dst, rows, cols);
  check_launch("conv2d (kernel transpose)");
}

// dst[n, y, x, c] = src[n, y + oy, x + ox, c] inside src, else 0: pads (oy, ox < 0) or crops.
__global__ void window_copy_kernel(const float* src, std::int64_t sh, std::int64_t sw, float* dst, std::int64_t n,
                                   std::int64_t dh, std::int64_t dw, std::int64_t c, std::int64_t oy,
                                   std::int64_t ox) {
  LOCKSTEP_GRID_LOOP(i, n * dh * dw * c) {
    const std::int64_t from = window::window_copy_source(i, sh, sw, dh, dw, c, oy, ox);
    dst[i] = from >= 0 ? src[from] : 0.0f;
  }
}

// ---- plans ----
using Key = std::array<std::int64_t, 18>;
Key key_of(const Conv2dDesc& d) {
  return {d.n, d.h, d.w, d.c, d.oh, d.ow, d.oc, d.kh, d.kw, d.stride_h, d.stride_w, d.dilation_h, d.dilation_w,
          d.pad_top, d.pad_left, d.pad_bottom, d.pad_right, d.groups};
}

template <typename Perf>
struct Candidates {
  std::vector<Perf> list;  // usable algorithms, best first
  std::size_t next = 0;    // the one in use
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

cudnnMathType_t math_type() { return tf32_allowed() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

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

Plan& plan_for(DnnState& st, const Conv2dDesc& d) {  // g_dnn_mu held
  auto& slot = st.plans[key_of(d)];
  if (slot) return *slot;
  auto p = std::make_unique<Plan>();
  check_dnn(cudnnCreateTensorDescriptor(&p->x), "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateTensorDescriptor(&p->y), "cudnnCreateTensorDescriptor");
  check_dnn(cudnnCreateFilterDescriptor(&p->w), "cudnnCreateFilterDescriptor");
  check_dnn(cudnnCreateConvolutionDescriptor(&p->conv), "cudnnCreateConvolutionDescriptor");
  const int cg = narrow(d.c / d.groups, "input channels per group");
  check_dnn(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, narrow(d.oc, "output channels"), cg,
                                       narrow(d.kh, "kernel height"), narrow(d.kw, "kernel width")),
            "cudnnSetFilter4dDescriptor");
  check_dnn(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, narrow(d.n, "batch"),
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
    check_dnn(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, narrow(d.n, "batch"),
                                         narrow(d.c, "channels"), narrow(p->hp, "height"), narrow(p->wp, "width")),
              "cudnnSetTensor4dDescriptor");
    check_dnn(cudnnSetConvolution2dDescriptor(p->conv, pad_h, pad_w, narrow(d.stride_h, "stride"),
                                              narrow(d.stride_w, "stride"), narrow(d.dilation_h, "dilation"),
                                              narrow(d.dilation_w, "dilation"), CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor");
    check_dnn(cudnnSetConvolutionGroupCount(p->conv, narrow(d.groups, "groups")), "cudnnSetConvolutionGroupCount");
    check_dnn(cudnnSetConvolutionMathType(p->conv, math_type()), "cudnnSetConvolutionMathType");
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

// The usable algorithms from a heuristic's list, best first within each tier: first those with
// the math type asked for (FMA: no TF32), deterministic, a workspace within kMaxWorkspace; where
// cuDNN has none of those, non-deterministic ones (float32 still, run-to-run bits may differ),
// then other math types, then any workspace: training slower or less reproducible beats not
// training. An empty list is an error naming the shape.
template <typename Perf>
void choose(Candidates<Perf>& out, const Perf* perf, int returned, const Conv2dDesc& d, const char* which) {
  const cudnnMathType_t math = math_type();
  for (int tier = 0; tier < 4 && out.list.empty(); ++tier) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS) continue;
      if (tier < 3 && p.memory > kMaxWorkspace) continue;
      if (tier < 2 && p.mathType != math) continue;
      if (tier == 0 && p.determinism != CUDNN_DETERMINISTIC) continue;
      out.list.push_back(p);
    }
  }
  if (out.list.empty())
    throw InternalError(std::string("cuDNN has no ") + which + " algorithm for a " + std::to_string(d.kh) + "x" +
                        std::to_string(d.kw) + " convolution of " + std::to_string(d.c) + " -> " +
                        std::to_string(d.oc) + " channels (groups " + std::to_string(d.groups) + ", input " +
                        std::to_string(d.h) + "x" + std::to_string(d.w) + ", batch " + std::to_string(d.n) + ")");
}

// On a direction's first call: asks cuDNN's heuristic (get(requested, &returned, perf), one of
// the cudnnGet…Algorithm_v7 calls) for its kCount algorithms and chooses among them, the plan's
// descriptor asking for math_type() (a call before may have left another algorithm's there).
template <int kCount, typename Perf, typename Get>
void ensure_chosen(Candidates<Perf>& c, cudnnConvolutionDescriptor_t conv, const Conv2dDesc& d, const char* which,
                   const char* api, Get&& get) {
  if (!c.list.empty()) return;
  check_dnn(cudnnSetConvolutionMathType(conv, math_type()), "cudnnSetConvolutionMathType");
  Perf perf[kCount];
  int returned = 0;
  check_dnn(get(kCount, &returned, perf), api);
  choose(c, perf, returned, d, which);
}

// Runs call(algorithm, workspace, bytes) with the plan's current algorithm, the descriptor set to
// the math type the heuristic gave with it: cuDNN picks an algorithm's kernels by both (since cuDNN
// 7.4; PyTorch sets it so before each call), which matters where choose() fell back to another
// math type. An algorithm cuDNN then refuses (NOT_SUPPORTED despite the heuristic) is dropped for
// the next one.
template <typename Perf, typename Call>
void run_with(ComputeContext& ctx, cudnnConvolutionDescriptor_t conv, Candidates<Perf>& c, const char* what,
              Call&& call) {
  for (;;) {
    const Perf& p = c.current();
    check_dnn(cudnnSetConvolutionMathType(conv, p.mathType), "cudnnSetConvolutionMathType");
    Scratch ws(ctx, p.memory ? p.memory : 1);
    const cudnnStatus_t s = call(p.algo, p.memory ? ws.as<void>() : nullptr, p.memory);
    if (s == CUDNN_STATUS_NOT_SUPPORTED && c.next + 1 < c.list.size()) {
      ++c.next;
      continue;
    }
    check_dnn(s, what);
    return;
  }
}

// Rows of the HWIO kernel matrix ([kh kw c/g, oc]).
std::int64_t kernel_rows(const Conv2dDesc& d) { return d.kh * d.kw * (d.c / d.groups); }

// The HWIO kernel w as cuDNN's KRSC, in scratch.
std::unique_ptr<Scratch> krsc_kernel(ComputeContext& ctx, cudaStream_t s, const Conv2dDesc& d, const void* w) {
  const std::int64_t kn = kernel_rows(d);
  auto out = std::make_unique<Scratch>(ctx, static_cast<std::size_t>(kn * d.oc) * sizeof(float));
  transpose(s, static_cast<const float*>(w), out->as<float>(), kn, d.oc);
  return out;
}

// x padded explicitly into scratch where the plan says so (else null: cuDNN pads).
std::unique_ptr<Scratch> padded_input(ComputeContext& ctx, cudaStream_t s, const Conv2dDesc& d, const Plan& p,
                                      const void* x) {
  if (!p.explicit_pad) return nullptr;
  const std::int64_t n = d.n * p.hp * p.wp * d.c;
  auto padded = std::make_unique<Scratch>(ctx, static_cast<std::size_t>(n) * sizeof(float));
  window_copy_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), d.h, d.w, padded->as<float>(),
                                                        d.n, p.hp, p.wp, d.c, -d.pad_top, -d.pad_left);
  check_launch("conv2d (padding)");
  return padded;
}

struct Locked {
  std::lock_guard<std::mutex> lock{g_dnn_mu};
};
}  // namespace

std::string cudnn_version() {
  const auto v = [](std::size_t n) {
    // cuDNN 9 numbers versions major * 10000 + minor * 100 + patch.
    return std::to_string(n / 10000) + "." + std::to_string(n / 100 % 100) + "." + std::to_string(n % 100);
  };
  return v(cudnnGetVersion()) + " (built with " + v(CUDNN_VERSION) + ")";
}

void conv2d(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* w, const void* bias, void* y) {
  if (d.n * d.oh * d.ow * d.oc == 0) return;
  CudaLane& dev = lane(ctx);
  const std::unique_ptr<Scratch> w_krsc = krsc_kernel(ctx, dev.stream, d, w);
  {
    Locked locked;
    const DnnLane st = dnn_state(dev);
    Plan& p = plan_for(st.state, d);
    ensure_chosen<CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        p.fwd, p.conv, d, "forward", "cudnnGetConvolutionForwardAlgorithm_v7", [&](int n, int* r, auto* perf) {
          return cudnnGetConvolutionForwardAlgorithm_v7(st.handle, p.x, p.w, p.conv, p.y, n, r, perf);
        });
    const std::unique_ptr<Scratch> padded = padded_input(ctx, dev.stream, d, p, x);
    const float* src = padded ? padded->as<float>() : static_cast<const float*>(x);
    const float one = 1.0f, zero = 0.0f;
    run_with(ctx, p.conv, p.fwd, "cudnnConvolutionForward", [&](cudnnConvolutionFwdAlgo_t algo, void* ws, std::size_t bytes) {
      return cudnnConvolutionForward(st.handle, &one, p.x, src, p.w, w_krsc->as<float>(), p.conv, algo, ws, bytes, &zero,
                                     p.y, y);
    });
  }
  bias_activation<float>(ctx, y, bias, d.n * d.oh * d.ow, d.oc, d.relu);
}

void conv2d_backward_data(ComputeContext& ctx, const Conv2dDesc& d, const void* w, const void* dy, void* dx) {
  if (d.n * d.h * d.w * d.c == 0) return;
  CudaLane& dev = lane(ctx);
  if (d.oh * d.ow * d.oc == 0) {
    check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(d.n * d.h * d.w * d.c) * sizeof(float), dev.stream),
          "cudaMemsetAsync");
    return;
  }
  const std::unique_ptr<Scratch> w_krsc = krsc_kernel(ctx, dev.stream, d, w);
  Locked locked;
  const DnnLane st = dnn_state(dev);
  Plan& p = plan_for(st.state, d);
  ensure_chosen<CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
      p.bwd_data, p.conv, d, "backward-data", "cudnnGetConvolutionBackwardDataAlgorithm_v7", [&](int n, int* r, auto* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(st.handle, p.w, p.y, p.conv, p.x, n, r, perf);
      });
  float* dst = static_cast<float*>(dx);
  std::unique_ptr<Scratch> padded;
  if (p.explicit_pad) {
    padded = std::make_unique<Scratch>(ctx, static_cast<std::size_t>(d.n * p.hp * p.wp * d.c) * sizeof(float));
    dst = padded->as<float>();
  }
  const float one = 1.0f, zero = 0.0f;
  run_with(ctx, p.conv, p.bwd_data, "cudnnConvolutionBackwardData",
           [&](cudnnConvolutionBwdDataAlgo_t algo, void* ws, std::size_t bytes) {
             return cudnnConvolutionBackwardData(st.handle, &one, p.w, w_krsc->as<float>(), p.y, dy, p.conv, algo, ws,
                                                 bytes, &zero, p.x, dst);
           });
  if (p.explicit_pad) {  // the input's gradient is the padded one's interior
    window_copy_kernel<<<blocks_for(d.n * d.h * d.w * d.c), kThreads, 0, dev.stream>>>(
        dst, p.hp, p.wp, static_cast<float*>(dx), d.n, d.h, d.w, d.c, d.pad_top, d.pad_left);
    check_launch("conv2d_backward_data (crop)");
  }
}

void conv2d_backward_weights(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* dy, void* dw,
                             void* db) {
  CudaLane& dev = lane(ctx);
  const std::int64_t kn = kernel_rows(d);
  if (d.n * d.oh * d.ow == 0) {  // no terms: zero gradients
    check(cudaMemsetAsync(dw, 0, static_cast<std::size_t>(kn * d.oc) * sizeof(float), dev.stream), "cudaMemsetAsync");
    if (db) check(cudaMemsetAsync(db, 0, static_cast<std::size_t>(d.oc) * sizeof(float), dev.stream), "cudaMemsetAsync");
    return;
  }
  Scratch dw_krsc(ctx, static_cast<std::size_t>(kn * d.oc) * sizeof(float));
  {
    Locked locked;
    const DnnLane st = dnn_state(dev);
    Plan& p = plan_for(st.state, d);
    ensure_chosen<CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        p.bwd_filter, p.conv, d, "backward-filter", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
        [&](int n, int* r, auto* perf) {
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(st.handle, p.x, p.y, p.conv, p.w, n, r, perf);
        });
    const std::unique_ptr<Scratch> padded = padded_input(ctx, dev.stream, d, p, x);
    const float* src = padded ? padded->as<float>() : static_cast<const float*>(x);
    const float one = 1.0f, zero = 0.0f;
    run_with(ctx, p.conv, p.bwd_filter, "cudnnConvolutionBackwardFilter",
             [&](cudnnConvolutionBwdFilterAlgo_t algo, void* ws, std::size_t bytes) {
               return cudnnConvolutionBackwardFilter(st.handle, &one, p.x, src, p.y, dy, p.conv, algo, ws, bytes,
                                                     &zero, p.w, dw_krsc.as<float>());
             });
  }
  transpose(dev.stream, dw_krsc.as<float>(), static_cast<float*>(dw), d.oc, kn);
  if (db) reduce_sum<float>(ctx, dy, db, 1, d.n * d.oh * d.ow, d.oc, 1.0f);
}

}  // namespace lockstep::backend::cuda
