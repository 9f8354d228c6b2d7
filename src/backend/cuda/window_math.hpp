#pragma once
// The per-element bodies of the CUDA pooling and convolution-layout kernels (pool.cu, conv.cu),
// as functions that compile for the host too: one GPU thread computes one output element by
// calling them, and the CPU suite (tests/backend/cuda_window_math_test.cpp) calls the very same
// functions over every element and compares with the CPU backend, so their index arithmetic
// and tie rules are tested on machines without a GPU. Plain C++ (no CUDA header).
#include <cstdint>
#include <limits>

#include "lockstep/core/host_device.hpp"
#include "backend/kernels.hpp"

namespace lockstep::backend::cuda::window {


/// The outputs whose windows cover input index i along one axis: [*lo, *hi] (empty when lo > hi).
LOCKSTEP_HOST_DEVICE inline void covering(std::int64_t i, std::int64_t pad, std::int64_t k, std::int64_t stride,
                                          std::int64_t out, std::int64_t* lo, std::int64_t* hi) {
  const std::int64_t first = i + pad - k + 1;  // the lowest window start (padded coordinates) covering i
  *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const std::int64_t last = (i + pad) / stride;
  *hi = last < out - 1 ? last : out - 1;
}

/// Output element i (NHWC flat index) of max or average pooling.
LOCKSTEP_HOST_DEVICE inline float pool_forward_at(const Pool2dDesc& d, const float* x, std::int64_t i) {
  std::int64_t r = i / d.c;
  const std::int64_t ch = i - r * d.c;
  const std::int64_t ox = r % d.ow;
  r /= d.ow;
  const std::int64_t oy = r % d.oh, n = r / d.oh;
  const PoolWindow w = pool_window(d, oy, ox);
  const float* xn = x + n * d.h * d.w * d.c + ch;
  float acc = d.max ? -std::numeric_limits<float>::infinity() : 0.0f;
  for (std::int64_t iy = w.y0; iy < w.y1; ++iy)
    for (std::int64_t ix = w.x0; ix < w.x1; ++ix) {
      const float v = xn[(iy * d.w + ix) * d.c];
      if (d.max) acc = max_of(acc, v);  // a NaN wins, as the CPU's max_pool_rows
      else acc += v;
    }
  if (!d.max) {
    const std::int64_t count = (w.y1 - w.y0) * (w.x1 - w.x0);
    acc = count > 0 ? acc / static_cast<float>(count) : 0.0f;
  }
  return acc;
}

/// Input-gradient element i of pooling, gathered from the windows that cover it in (oy, ox)
/// order (no atomics: the same bits on every run). Max pooling: a window's gradient goes to its
/// first (row-major) element that gave its maximum y (kernels.hpp's gave_max: a NaN maximum's
/// first NaN), as the CPU backend's and TF's; with relu_input, a window whose maximum is not
/// positive hands out nothing.
LOCKSTEP_HOST_DEVICE inline float pool_backward_at(const Pool2dDesc& d, const float* x, const float* y,
                                                   const float* dy, std::int64_t i) {
  std::int64_t r = i / d.c;
  const std::int64_t ch = i - r * d.c;
  const std::int64_t ix = r % d.w;
  r /= d.w;
  const std::int64_t iy = r % d.h, n = r / d.h;
  std::int64_t oy0, oy1, ox0, ox1;
  covering(iy, d.pad_top, d.kh, d.stride_h, d.oh, &oy0, &oy1);
  covering(ix, d.pad_left, d.kw, d.stride_w, d.ow, &ox0, &ox1);
  const float* xn = x + n * d.h * d.w * d.c + ch;
  const float xv = xn[(iy * d.w + ix) * d.c];
  float acc = 0.0f;
  for (std::int64_t oy = oy0; oy <= oy1; ++oy)
    for (std::int64_t ox = ox0; ox <= ox1; ++ox) {
      const std::int64_t o = ((n * d.oh + oy) * d.ow + ox) * d.c + ch;
      const PoolWindow w = pool_window(d, oy, ox);
      if (!d.max) {
        acc += dy[o] / static_cast<float>((w.y1 - w.y0) * (w.x1 - w.x0));
        continue;
      }
      const float m = y[o];
      if (!gave_max(xv, m) || (d.relu_input && !(m > 0.0f))) continue;
      bool first = true;  // no element before this one in the window gave the maximum
      for (std::int64_t yy = w.y0; yy <= iy && first; ++yy) {
        const std::int64_t end = yy < iy ? w.x1 : ix;
        for (std::int64_t xx = w.x0; xx < end; ++xx)
          if (gave_max(xn[(yy * d.w + xx) * d.c], m)) {
            first = false;
            break;
          }
      }
      if (first) acc += dy[o];
    }
  return acc;
}

/// Element i of the [cols, rows] transpose of a row-major [rows, cols] matrix: the HWIO kernel
/// ([kh kw c/g, oc]) as cuDNN's KRSC ([oc, kh kw c/g]) and back.
LOCKSTEP_HOST_DEVICE inline std::int64_t transpose_source(std::int64_t i, std::int64_t rows, std::int64_t cols) {
  const std::int64_t c = i / rows, r = i - c * rows;
  return r * cols + c;
}

/// Element i of dst[n, dh, dw, c] = src[n, y + oy, x + ox, c] (sh x sw source), or -1 where
/// that is outside the source (a zero): pads the input when oy, ox < 0, crops when > 0.
LOCKSTEP_HOST_DEVICE inline std::int64_t window_copy_source(std::int64_t i, std::int64_t sh, std::int64_t sw,
                                                            std::int64_t dh, std::int64_t dw, std::int64_t c,
                                                            std::int64_t oy, std::int64_t ox) {
  std::int64_t r = i / c;
  const std::int64_t ch = i - r * c;
  const std::int64_t x = r % dw;
  r /= dw;
  const std::int64_t y = r % dh, b = r / dh;
  const std::int64_t iy = y + oy, ix = x + ox;
  return iy >= 0 && iy < sh && ix >= 0 && ix < sw ? ((b * sh + iy) * sw + ix) * c + ch : -1;
}

}  // namespace lockstep::backend::cuda::window
