// The weighted gather along a middle axis (kernel_ops.def's resample row): one axis of an image's
// resize and its gradient, one thread per output value (neighbouring threads, neighbouring values
// of a row: coalesced reads of each tap's input row), its taps added in order as the CPU adds them.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"

namespace lockstep::backend::cuda {

namespace {
template <typename F>
__global__ void resample_kernel(const F* x, const std::int64_t* index, const float* weight, std::int64_t in,
                                std::int64_t out, std::int64_t taps, std::int64_t inner, std::int64_t n, F* y) {
  LOCKSTEP_GRID_LOOP(i, n) {
    const std::int64_t k = i / inner, j = i % inner;
    const std::int64_t r = k / out, o = k % out;
    const F* src = x + r * in * inner + j;
    float acc = 0.0f;
    for (std::int64_t t = o * taps; t < (o + 1) * taps; ++t) {
      const float w = weight[t];
      const std::int64_t at = index[t];
      if (w != 0.0f && at >= 0 && at < in) acc = fmaf(w, Elem<F>::load(src[at * inner]), acc);
    }
    y[i] = Elem<F>::store(acc);
  }
}
}  // namespace

template <typename F>
void resample(ComputeContext& ctx, const void* x, const std::int64_t* index, const float* weight, std::int64_t rows,
              std::int64_t in, std::int64_t out, std::int64_t taps, std::int64_t inner, void* y) {
  const std::int64_t n = rows * out * inner;
  if (n == 0) return;
  resample_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<const F*>(x), index, weight, in, out,
                                                                   taps, inner, n, static_cast<F*>(y));
  check_launch("resample");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, resample)

}  // namespace lockstep::backend::cuda
