// The weighted gather along a middle axis (kernel_ops.def's resample row): one axis of an image's
// resize and its gradient. Each output row of `inner` values is the sum of a few input rows, each
// times its weight: the work of the taps alone (a dense product over the axis did in / taps times
// more), one pass over the output while the inputs it reads stay in cache.
#include <type_traits>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/vec_math.hpp"

namespace lockstep::backend::cpu {

namespace {
struct Axis {
  const std::int64_t* index;
  const float* weight;
  std::int64_t in, out, taps, inner;
  bool reads(const std::int64_t* at, const float* w, std::int64_t t) const {
    return w[t] != 0.0f && at[t] >= 0 && at[t] < in;
  }
};

// C values from j of one output row (src: its example's rows, at and w: its taps), summed in
// float32 accumulators that C, known here, keeps in registers: no call to clear or copy them,
// which cost more than the sums on short rows (an image's channels). Float rows add whole
// vectors (vec_math.hpp), each lane as a scalar would: the compiler's own vectorising of this
// loop kept some accumulators in memory.
template <typename T, int C>
void resample_chunk(const T* src, const Axis& a, const std::int64_t* at, const float* w, std::int64_t j, T* dst) {
  if constexpr (std::is_same_v<T, float> && C % vec::kLanes == 0) {
    constexpr int kVecs = C / vec::kLanes;
    vec::Vec acc[kVecs] = {};
    for (std::int64_t t = 0; t < a.taps; ++t) {
      if (!a.reads(at, w, t)) continue;
      const float* row = src + at[t] * a.inner + j;
      const vec::Vec wt = vec::splat(w[t]);
      for (int v = 0; v < kVecs; ++v) acc[v] += wt * vec::load(row + v * vec::kLanes);
    }
    for (int v = 0; v < kVecs; ++v) vec::store(dst + j + v * vec::kLanes, acc[v]);
  } else {
    float acc[C] = {};
    for (std::int64_t t = 0; t < a.taps; ++t) {
      if (!a.reads(at, w, t)) continue;
      const T* row = src + at[t] * a.inner + j;
      const float wt = w[t];
      for (int c = 0; c < C; ++c) acc[c] += wt * Elem<T>::load(row[c]);
    }
    for (int c = 0; c < C; ++c) dst[j + c] = Elem<T>::store(acc[c]);
  }
}

// Outputs k in [k0, k1) (row k / out, output k % out), C values each: a pixel's channels, the
// loops unrolled (the width of an RGB image: a loop over 3 values would cost more than its sums).
template <typename T, int C>
void resample_pixels(const T* x, const Axis& a, T* y, std::int64_t k0, std::int64_t k1) {
  for (std::int64_t k = k0; k < k1; ++k) {
    const std::int64_t r = k / a.out, o = k % a.out;
    resample_chunk<T, C>(x + r * a.in * C, a, a.index + o * a.taps, a.weight + o * a.taps, 0, y + k * C);
  }
}

// The same for rows of any length: 64 values at a time, then 16, then the last ones one by one.
template <typename T>
void resample_rows(const T* x, const Axis& a, T* y, std::int64_t k0, std::int64_t k1) {
  for (std::int64_t k = k0; k < k1; ++k) {
    const std::int64_t r = k / a.out, o = k % a.out;
    const T* src = x + r * a.in * a.inner;
    const std::int64_t* at = a.index + o * a.taps;
    const float* w = a.weight + o * a.taps;
    T* dst = y + k * a.inner;
    std::int64_t j = 0;
    for (; j + 64 <= a.inner; j += 64) resample_chunk<T, 64>(src, a, at, w, j, dst);
    for (; j + 16 <= a.inner; j += 16) resample_chunk<T, 16>(src, a, at, w, j, dst);
    for (; j < a.inner; ++j) resample_chunk<T, 1>(src, a, at, w, j, dst);
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
