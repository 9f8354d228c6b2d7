// The weighted gather along a middle axis (kernel_ops.def's resample row): one axis of an image's
// resize and its gradient. Each output row of `inner` values is the sum of a few input rows, each
// times its weight: the work of the taps alone (a dense product over the axis did in / taps times
// more), one pass over the output while the inputs it reads stay in cache.
#include <algorithm>

#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
// Values of one output row summed at a time: a float32 accumulator on the stack (1 KiB), so
// 16-bit rows are widened once per tap and an output is stored once.
constexpr std::int64_t kBlock = 256;

struct Axis {
  const std::int64_t* index;
  const float* weight;
  std::int64_t in, out, taps, inner;
  bool reads(const std::int64_t* at, const float* w, std::int64_t t) const {
    return w[t] != 0.0f && at[t] >= 0 && at[t] < in;
  }
};

// Outputs k in [k0, k1) (row k / out, output k % out), C values each: a pixel's channels, the
// loops unrolled (the width of an RGB image: a loop over 3 values would cost more than its sums).
template <typename T, int C>
void resample_pixels(const T* x, const Axis& a, T* y, std::int64_t k0, std::int64_t k1) {
  for (std::int64_t k = k0; k < k1; ++k) {
    const std::int64_t r = k / a.out, o = k % a.out;
    const T* src = x + r * a.in * C;
    const std::int64_t* at = a.index + o * a.taps;
    const float* w = a.weight + o * a.taps;
    float acc[C] = {};
    for (std::int64_t t = 0; t < a.taps; ++t)
      if (a.reads(at, w, t))
        for (int c = 0; c < C; ++c) acc[c] += w[t] * Elem<T>::load(src[at[t] * C + c]);
    for (int c = 0; c < C; ++c) y[k * C + c] = Elem<T>::store(acc[c]);
  }
}

// The same for rows of any length, kBlock values at a time (a vectorised loop over each).
template <typename T>
void resample_rows(const T* x, const Axis& a, T* y, std::int64_t k0, std::int64_t k1) {
  float acc[kBlock];
  for (std::int64_t k = k0; k < k1; ++k) {
    const std::int64_t r = k / a.out, o = k % a.out;
    const T* src = x + r * a.in * a.inner;
    const std::int64_t* at = a.index + o * a.taps;
    const float* w = a.weight + o * a.taps;
    T* dst = y + k * a.inner;
    for (std::int64_t j0 = 0; j0 < a.inner; j0 += kBlock) {
      const std::int64_t n = std::min(kBlock, a.inner - j0);
      for (std::int64_t j = 0; j < n; ++j) acc[j] = 0.0f;
      for (std::int64_t t = 0; t < a.taps; ++t) {
        if (!a.reads(at, w, t)) continue;
        const T* row = src + at[t] * a.inner + j0;
        const float wt = w[t];
        for (std::int64_t j = 0; j < n; ++j) acc[j] += wt * Elem<T>::load(row[j]);
      }
      for (std::int64_t j = 0; j < n; ++j) dst[j0 + j] = Elem<T>::store(acc[j]);
    }
  }
}
}  // namespace

template <typename T>
void resample(ComputeContext& ctx, const void* xv, const std::int64_t* index, const float* weight, std::int64_t rows,
              std::int64_t in, std::int64_t out, std::int64_t taps, std::int64_t inner, void* yv) {
  const T* x = static_cast<const T*>(xv);
  T* y = static_cast<T*>(yv);
  const Axis a{index, weight, in, out, taps, inner};
  // Outputs (r, o) split over the pool; each is written by one thread, its taps in order.
  parallel_rows(ctx, rows * out, taps * inner + inner, [=, &a](std::int64_t k0, std::int64_t k1) {
    switch (inner) {
      case 1: return resample_pixels<T, 1>(x, a, y, k0, k1);
      case 2: return resample_pixels<T, 2>(x, a, y, k0, k1);
      case 3: return resample_pixels<T, 3>(x, a, y, k0, k1);
      case 4: return resample_pixels<T, 4>(x, a, y, k0, k1);
      default: return resample_rows<T>(x, a, y, k0, k1);
    }
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, resample)

}  // namespace lockstep::backend::cpu
