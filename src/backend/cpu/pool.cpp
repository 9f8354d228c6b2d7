// Pooling: average's forward and backward through oneDNN's pooling primitives on NHWC tensors,
// split over the pool by batch parts like convolution. Max pooling is loops here: oneDNN's
// forward skips a NaN (max_pool_rows), and its backward needs the forward's opaque workspace,
// which would have to live on the tape; finding each window's maximum again in x is as cheap.
#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "backend/cpu/conv_common.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/vec_math.hpp"

namespace lockstep::backend::cpu {

namespace {
using dnnl::memory;
using Dims = memory::dims;

dnnl::algorithm algorithm_of(const Pool2dDesc& d) {
  return d.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
}

dnnl::pooling_forward::primitive_desc forward_pd(const Pool2dDesc& d, dnnl::prop_kind kind) {
  dnnl::pooling_forward::desc pd(kind, algorithm_of(d), nhwc(d.n, d.c, d.h, d.w), nhwc(d.n, d.c, d.oh, d.ow),
                                 Dims{d.stride_h, d.stride_w}, Dims{d.kh, d.kw}, Dims{d.pad_top, d.pad_left},
                                 Dims{d.pad_bottom, d.pad_right});
  return {pd, onednn::engine()};
}

struct Forward {
  dnnl::pooling_forward prim;
  memory src, dst;
  explicit Forward(const dnnl::pooling_forward::primitive_desc& pd) : prim(pd) {
    src = memory(pd.src_desc(), onednn::engine(), DNNL_MEMORY_NONE);
    dst = memory(pd.dst_desc(), onednn::engine(), DNNL_MEMORY_NONE);
  }
};

struct Backward {
  dnnl::pooling_backward prim;
  memory diff_src, diff_dst;
  explicit Backward(const dnnl::pooling_backward::primitive_desc& pd) : prim(pd) {
    diff_src = memory(pd.diff_src_desc(), onednn::engine(), DNNL_MEMORY_NONE);
    diff_dst = memory(pd.diff_dst_desc(), onednn::engine(), DNNL_MEMORY_NONE);
  }
};

using Key = std::array<std::int64_t, 15>;
Key key_of(const Pool2dDesc& d) {
  return {d.n, d.h, d.w, d.c, d.oh, d.ow, d.kh, d.kw, d.stride_h, d.stride_w, d.pad_top, d.pad_left,
          d.pad_bottom, d.pad_right, d.max ? 1 : 0};
}

Pool2dDesc part_of(const Pool2dDesc& d, std::int64_t rows) {
  Pool2dDesc p = d;
  p.n = rows;
  return p;
}

// Memory-bound: x read and y written (the backward also reads y and dy and writes dx).
double pool_cost(const Pool2dDesc& d) {
  return BatchParts::memory_bound(static_cast<double>(d.n * d.c * (d.h * d.w + d.oh * d.ow)));
}

#if defined(__AVX2__)
// kernels.hpp's gave_max, lane by lane: x equals m, or both are NaN.
inline __m256 gave_max8(__m256 x, __m256 m) {
  const __m256 both_nan = _mm256_and_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), _mm256_cmp_ps(m, m, _CMP_UNORD_Q));
  return _mm256_or_ps(_mm256_cmp_ps(x, m, _CMP_EQ_OQ), both_nan);
}
#endif
#if defined(__AVX512F__)
// The same of the lanes in `lanes`; m_nan: the lanes where m is NaN.
inline __mmask16 gave_max16(__mmask16 lanes, __m512 x, __m512 m, __mmask16 m_nan) {
  return static_cast<__mmask16>(_mm512_mask_cmp_ps_mask(lanes, x, m, _CMP_EQ_OQ) |
                                _mm512_mask_cmp_ps_mask(static_cast<__mmask16>(lanes & m_nan), x, x, _CMP_UNORD_Q));
}
#endif

// One window's gradient `rest` (c channels) to its first maximum in row-major order (as TF's;
// kernels.hpp's gave_max: a window whose maximum is NaN, to its first NaN).
// The channel loop is innermost and branch-free, so it vectorises over NHWC's contiguous
// channels: `rest` holds what the window has not handed out yet, and the first x equal to the
// maximum takes it. kStore: the window owns its elements (no other window overlaps them), so it
// writes them, zeros included, instead of adding to a zeroed dx.
template <bool kStore>
void max_pool_window(const Pool2dDesc& d, const float* xn, const float* __restrict m, float* __restrict rest,
                     float* dxn, std::int64_t y0, std::int64_t y1, std::int64_t x0, std::int64_t x1) {
  const std::int64_t c = d.c;
  for (std::int64_t iy = y0; iy < y1; ++iy) {
    for (std::int64_t ix = x0; ix < x1; ++ix) {
      const std::int64_t i = (iy * d.w + ix) * c;
      const float* __restrict xi = xn + i;
      float* __restrict dxi = dxn + i;
      std::int64_t ch = 0;
#if defined(__AVX2__)
      // Spelled out: under -ftrapping-math GCC will not vectorise a float compare.
      for (; ch + 8 <= c; ch += 8) {
        const __m256 r = _mm256_loadu_ps(rest + ch);
        const __m256 hit = gave_max8(_mm256_loadu_ps(xi + ch), _mm256_loadu_ps(m + ch));
        const __m256 take = _mm256_and_ps(hit, r);
        _mm256_storeu_ps(dxi + ch, kStore ? take : _mm256_add_ps(_mm256_loadu_ps(dxi + ch), take));
        _mm256_storeu_ps(rest + ch, _mm256_andnot_ps(hit, r));
      }
#endif
      for (; ch < c; ++ch) {
        const float r = rest[ch];
        const bool hit = gave_max(xi[ch], m[ch]);
        const float take = hit ? r : 0.0f;
        dxi[ch] = kStore ? take : dxi[ch] + take;
        rest[ch] = hit ? 0.0f : r;
      }
    }
  }
}

// The common case (Keras' default 2x2 pool, stride 2, no padding) without the generic loop's
// `rest` in memory: a window's four elements are compared in registers and each written once;
// the window's gradient goes to its first maximum in row-major order, as TF's (gave_max).
void max_pool_backward_2x2(const Pool2dDesc& d, const float* xn, const float* y, const float* dy, float* dxn,
                           std::int64_t n) {
  const std::int64_t c = d.c, row = d.w * c;
  for (std::int64_t oy = 0; oy < d.oh; ++oy) {
    for (std::int64_t ox = 0; ox < d.ow; ++ox) {
      const std::int64_t o = ((n * d.oh + oy) * d.ow + ox) * c, i = (2 * oy * d.w + 2 * ox) * c;
      const float* __restrict m = y + o;
      const float* __restrict g = dy + o;
      const float* __restrict x0 = xn + i;
      const float* __restrict x1 = xn + i + row;
      float* __restrict d0 = dxn + i;
      float* __restrict d1 = dxn + i + row;
      std::int64_t ch = 0;
#if defined(__AVX512F__)
      for (; ch + 16 <= c; ch += 16) {
        const __m512 mv = _mm512_loadu_ps(m + ch);
        const __mmask16 m_nan = _mm512_cmp_ps_mask(mv, mv, _CMP_UNORD_Q);
        __mmask16 left = d.relu_input ? _mm512_cmp_ps_mask(mv, _mm512_setzero_ps(), _CMP_GT_OQ) : __mmask16(0xFFFF);
        const __m512 gv = _mm512_loadu_ps(g + ch);
        const float* xs[4] = {x0 + ch, x0 + c + ch, x1 + ch, x1 + c + ch};
        float* ds[4] = {d0 + ch, d0 + c + ch, d1 + ch, d1 + c + ch};
        for (int k = 0; k < 4; ++k) {
          const __mmask16 hit = gave_max16(left, _mm512_loadu_ps(xs[k]), mv, m_nan);
          _mm512_storeu_ps(ds[k], _mm512_maskz_mov_ps(hit, gv));
          left = static_cast<__mmask16>(left & ~hit);
        }
      }
#elif defined(__AVX2__)
      for (; ch + 8 <= c; ch += 8) {
        const __m256 mv = _mm256_loadu_ps(m + ch);
        __m256 left = _mm256_loadu_ps(g + ch);
        if (d.relu_input) left = _mm256_and_ps(_mm256_cmp_ps(mv, _mm256_setzero_ps(), _CMP_GT_OQ), left);
        const float* xs[4] = {x0 + ch, x0 + c + ch, x1 + ch, x1 + c + ch};
        float* ds[4] = {d0 + ch, d0 + c + ch, d1 + ch, d1 + c + ch};
        for (int k = 0; k < 4; ++k) {
          const __m256 hit = gave_max8(_mm256_loadu_ps(xs[k]), mv);
          _mm256_storeu_ps(ds[k], _mm256_and_ps(hit, left));
          left = _mm256_andnot_ps(hit, left);
        }
      }
#endif
      for (; ch < c; ++ch) {
        float left = d.relu_input && !(m[ch] > 0.0f) ? 0.0f : g[ch];
        const float* xs[4] = {x0 + ch, x0 + c + ch, x1 + ch, x1 + c + ch};
        float* ds[4] = {d0 + ch, d0 + c + ch, d1 + ch, d1 + c + ch};
        for (int k = 0; k < 4; ++k) {
          const bool hit = gave_max(*xs[k], m[ch]);
          *ds[k] = hit ? left : 0.0f;
          left = hit ? 0.0f : left;
        }
      }
    }
  }
}

void max_pool_backward_rows(const Pool2dDesc& d, const float* x, const float* y, const float* dy, float* dx,
                            std::int64_t n0, std::int64_t n1) {
  const std::int64_t c = d.c;
  // Windows that tile x without overlap or gaps (stride == pool size, no padding: Keras'
  // default) write every element they cover, so only the rows and columns past the last window
  // are zeroed; otherwise dx is zeroed and windows add into it.
  const bool tiles = d.stride_h == d.kh && d.stride_w == d.kw && d.pad_top == 0 && d.pad_left == 0 &&
                     d.pad_bottom == 0 && d.pad_right == 0;
  const std::int64_t covered_h = tiles ? d.oh * d.kh : 0, covered_w = tiles ? d.ow * d.kw : 0;
  thread_local std::vector<float> left;
  left.resize(static_cast<std::size_t>(c));
  float* __restrict const rest = left.data();
  for (std::int64_t n = n0; n < n1; ++n) {
    const float* xn = x + n * d.h * d.w * c;
    float* dxn = dx + n * d.h * d.w * c;
    if (!tiles) {
      std::fill(dxn, dxn + d.h * d.w * c, 0.0f);
    } else {
      for (std::int64_t iy = 0; iy < d.h; ++iy) {
        const std::int64_t from = iy < covered_h ? covered_w : 0;
        std::fill(dxn + (iy * d.w + from) * c, dxn + (iy + 1) * d.w * c, 0.0f);
      }
    }
    if (tiles && d.kh == 2 && d.kw == 2) {
      max_pool_backward_2x2(d, xn, y, dy, dxn, n);
      continue;
    }
    for (std::int64_t oy = 0; oy < d.oh; ++oy) {
      for (std::int64_t ox = 0; ox < d.ow; ++ox) {
        const auto [y0, y1, x0, x1] = pool_window(d, oy, ox);
        const std::int64_t o = ((n * d.oh + oy) * d.ow + ox) * c;
        const float* __restrict m = y + o;
        const float* __restrict g = dy + o;
        if (d.relu_input) {
          std::int64_t ch = 0;
#if defined(__AVX2__)
          for (; ch + 8 <= c; ch += 8) {
            const __m256 pos = _mm256_cmp_ps(_mm256_loadu_ps(m + ch), _mm256_setzero_ps(), _CMP_GT_OQ);
            _mm256_storeu_ps(rest + ch, _mm256_and_ps(pos, _mm256_loadu_ps(g + ch)));
          }
#endif
          for (; ch < c; ++ch) rest[ch] = m[ch] > 0.0f ? g[ch] : 0.0f;
        } else {
          std::copy(g, g + c, rest);
        }
        if (tiles) max_pool_window<true>(d, xn, m, rest, dxn, y0, y1, x0, x1);
        else max_pool_window<false>(d, xn, m, rest, dxn, y0, y1, x0, x1);
      }
    }
  }
}
}  // namespace

namespace {
// Max pooling's forward for examples [n0, n1): each window's largest element, a NaN winning
// (kernels.hpp's max_of), as reduce_max and the fused conv2d_max_pool2d take it and CUDA's
// pool.cu; a window of -inf gives -inf. Ours, not oneDNN's pooling_max, which skips a NaN and
// starts from -FLT_MAX: a window of NaN gave -3.4e38, so a model whose activations became NaN
// got finite numbers past it. A window's maximum of a vector of NHWC's contiguous channels is
// kept in a register (about 1.2x oneDNN's JIT kernel's time, one thread, MNIST convnet shapes).
void max_pool_rows(const Pool2dDesc& d, const float* x, float* y, std::int64_t n0, std::int64_t n1) {
  constexpr int kL = vec::kLanes;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  const std::int64_t c = d.c;
  for (std::int64_t n = n0; n < n1; ++n) {
    const float* xn = x + n * d.h * d.w * c;
    for (std::int64_t oy = 0; oy < d.oh; ++oy) {
      for (std::int64_t ox = 0; ox < d.ow; ++ox) {
        const auto [y0, y1, x0, x1] = pool_window(d, oy, ox);
        float* m = y + ((n * d.oh + oy) * d.ow + ox) * c;
        std::int64_t ch = 0;
        for (; ch + kL <= c; ch += kL) {
          vec::Vec acc = vec::splat(kLowest);
          for (std::int64_t iy = y0; iy < y1; ++iy)
            for (std::int64_t ix = x0; ix < x1; ++ix) {
              const vec::Vec v = vec::load(xn + (iy * d.w + ix) * c + ch);
              acc = (acc > v) | (acc != acc) ? acc : v;  // max_of, lane by lane
            }
          vec::store(m + ch, acc);
        }
        for (; ch < c; ++ch) {
          float acc = kLowest;
          for (std::int64_t iy = y0; iy < y1; ++iy)
            for (std::int64_t ix = x0; ix < x1; ++ix) acc = max_of(acc, xn[(iy * d.w + ix) * c + ch]);
          m[ch] = acc;
        }
      }
    }
  }
}
}  // namespace

void pool2d(ComputeContext& ctx, const Pool2dDesc& d, const void* x, void* y) {
  const BatchParts parts(ctx, d.n, pool_cost(d));
  const auto* xs = static_cast<const float*>(x);
  auto* ys = static_cast<float*>(y);
  if (d.max) {
    parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) { max_pool_rows(d, xs, ys, n0, n1); });
    return;
  }
  parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
    guarded("pool2d", [&] {
      thread_local PrimitiveCache<Key, Forward> cache;
      const Pool2dDesc p = part_of(d, n1 - n0);
      Forward& f = cache.get(key_of(p), [&] {
        return std::make_unique<Forward>(forward_pd(p, dnnl::prop_kind::forward_inference));
      });
      f.src.set_data_handle(const_cast<float*>(xs + n0 * d.h * d.w * d.c));
      f.dst.set_data_handle(ys + n0 * d.oh * d.ow * d.c);
      dnnl::stream& s = onednn::stream();
      f.prim.execute(s, {{DNNL_ARG_SRC, f.src}, {DNNL_ARG_DST, f.dst}});
      s.wait();
    });
  });
}

void pool2d_backward(ComputeContext& ctx, const Pool2dDesc& d, const void* x, const void* y, const void* dy,
                     void* dx) {
  const BatchParts parts(ctx, d.n, pool_cost(d));
  const auto* dys = static_cast<const float*>(dy);
  auto* dxs = static_cast<float*>(dx);
  if (d.max) {
    parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
      max_pool_backward_rows(d, static_cast<const float*>(x), static_cast<const float*>(y), dys, dxs, n0, n1);
    });
    return;
  }
  parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
    guarded("pool2d_backward", [&] {
      thread_local PrimitiveCache<Key, Backward> cache;
      const Pool2dDesc p = part_of(d, n1 - n0);
      Backward& b = cache.get(key_of(p), [&] {
        dnnl::pooling_backward::desc bd(algorithm_of(p), nhwc(p.n, p.c, p.h, p.w), nhwc(p.n, p.c, p.oh, p.ow),
                                        Dims{p.stride_h, p.stride_w}, Dims{p.kh, p.kw}, Dims{p.pad_top, p.pad_left},
                                        Dims{p.pad_bottom, p.pad_right});
        return std::make_unique<Backward>(dnnl::pooling_backward::primitive_desc(
            bd, onednn::engine(), forward_pd(p, dnnl::prop_kind::forward_training)));
      });
      b.diff_dst.set_data_handle(const_cast<float*>(dys + n0 * d.oh * d.ow * d.c));
      b.diff_src.set_data_handle(dxs + n0 * d.h * d.w * d.c);
      dnnl::stream& s = onednn::stream();
      b.prim.execute(s, {{DNNL_ARG_DIFF_DST, b.diff_dst}, {DNNL_ARG_DIFF_SRC, b.diff_src}});
      s.wait();
    });
  });
}

}  // namespace lockstep::backend::cpu
