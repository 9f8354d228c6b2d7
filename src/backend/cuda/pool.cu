// Max and average pooling over NHWC tensors, float32: lockstep's own kernels rather than cuDNN's
// pooling, because the CPU backend's semantics are what the parity harness checks and cuDNN's
// differ in two of them: max pooling's gradient goes to the *first* (row-major) element of a
// window that gave its maximum (TF's rule, a NaN maximum's first NaN: kernels.hpp's gave_max;
// cuDNN's choice among ties is its own), and a `relu_input` window whose maximum is not
// positive hands out nothing (Pool2dDesc). Average pooling divides by the window elements
// inside the input (padding excluded).
// One thread per output element (forward) or input element (backward, gathering from the
// windows that cover it: no atomics, the same bits on every run); the bodies are in
// window_math.hpp, which the CPU suite tests against the CPU backend. NHWC makes a warp's
// threads neighbouring channels of one pixel: coalesced.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/window_math.hpp"

namespace lockstep::backend::cuda {

namespace {
__global__ void pool_forward_kernel(Pool2dDesc d, const float* x, float* y) {
  LOCKSTEP_GRID_LOOP(i, d.n * d.oh * d.ow * d.c) y[i] = window::pool_forward_at(d, x, i);
}

__global__ void pool_backward_kernel(Pool2dDesc d, const float* x, const float* y, const float* dy, float* dx) {
  LOCKSTEP_GRID_LOOP(i, d.n * d.h * d.w * d.c) dx[i] = window::pool_backward_at(d, x, y, dy, i);
}
}  // namespace

void pool2d(ComputeContext& ctx, const Pool2dDesc& d, const void* x, void* y) {
  const std::int64_t n = d.n * d.oh * d.ow * d.c;
  if (n == 0) return;
  pool_forward_kernel<<<blocks_for(n), kThreads, 0, stream(ctx)>>>(d, static_cast<const float*>(x),
                                                                    static_cast<float*>(y));
  check_launch("pool2d");
}

void pool2d_backward(ComputeContext& ctx, const Pool2dDesc& d, const void* x, const void* y, const void* dy,
                     void* dx) {
  const std::int64_t n = d.n * d.h * d.w * d.c;
  if (n == 0) return;
  pool_backward_kernel<<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      d, static_cast<const float*>(x), static_cast<const float*>(y), static_cast<const float*>(dy),
      static_cast<float*>(dx));
  check_launch("pool2d_backward");
}

}  // namespace lockstep::backend::cuda
