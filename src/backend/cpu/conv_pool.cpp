// A convnet's first convolution and the max pooling after it in one pass, never storing the
// convolution's output (DESIGN-NOTES, "Convolution and max pooling in one pass").
//
// Why: in Keras' MNIST convnet the first convolution (3x3, one input channel, 32 filters) does
// 3% of the step's multiplies but writes an 11 MB output at batch 128, which max pooling's
// forward, its backward, the kernel gradient and the bias gradient then each read or write in
// full: about a quarter of a step, all memory-bound (PERFORMANCE 9). Here each pooling window's
// convolutions are computed in registers, only the window's maximum and the index of its first
// maximum (a byte) are stored, and the backward sends each gradient to that index directly.
//
// How: a convolution whose window holds at most kMaxFusedConvTaps inputs (kh * kw * c) keeps
// the taps of 16 filters in zmm registers (K of them, K a template argument; two blocks of 16
// filters where both fit, so each broadcast input feeds two FMAs), and a pooling window's
// elements are summed as 4 independent FMA chains. The backward accumulates the kernel gradient
// in K registers per block, per example. The batch is split into BatchParts like the oneDNN
// convolutions; the kernel gradient's parts are added in part order (PartSums: bit-reproducible
// for a given pool size). The forward's numbers do not depend on the split.
#include "backend/cpu/cpu_kernels.hpp"

#ifdef LOCKSTEP_CPU_CONV_MAX_POOL
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "backend/cpu/conv_common.hpp"

namespace lockstep::backend::cpu {

namespace {
constexpr std::int64_t kLanes = 16;
constexpr int kGroup = 4;  // window elements convolved at once (a 2x2 pooling window's)

// The padded input's size, where a convolution window's taps lie from its top-left input, and
// where a pooling window's elements (convolutions) start from the pooling window's, in floats.
struct Taps {
  std::int64_t hp = 0, wp = 0, row = 0;  // padded height, width, floats per padded row
  std::int64_t count = 0;                // kh * kw * c, in the kernel's (ky, kx, ci) order
  std::array<std::int64_t, kMaxFusedConvTaps> offset{};
  std::array<std::int64_t, 256> element{};  // row-major in the pooling window (at most 255)
};
Taps taps_of(const Conv2dDesc& c, const Pool2dDesc& p) {
  Taps t;
  t.hp = c.h + c.pad_top + c.pad_bottom;
  t.wp = c.w + c.pad_left + c.pad_right;
  t.row = t.wp * c.c;
  for (std::int64_t ky = 0; ky < c.kh; ++ky)
    for (std::int64_t kx = 0; kx < c.kw; ++kx)
      for (std::int64_t ci = 0; ci < c.c; ++ci) t.offset[static_cast<std::size_t>(t.count++)] = ky * t.row + kx * c.c + ci;
  for (std::int64_t q = 0; q < p.kh * p.kw; ++q) t.element[static_cast<std::size_t>(q)] = (q / p.kw) * t.row + (q % p.kw) * c.c;
  return t;
}

bool pads(const Conv2dDesc& c) { return c.pad_top || c.pad_bottom || c.pad_left || c.pad_right; }

// Example n of x; copied into `scratch` with its zero border when the convolution pads, so the
// inner loops read every tap without a bounds check.
const float* example(const Conv2dDesc& c, const Taps& t, const float* x, std::int64_t n, std::vector<float>& scratch) {
  const float* xn = x + n * c.h * c.w * c.c;
  if (!pads(c)) return xn;
  scratch.assign(static_cast<std::size_t>(t.hp * t.row), 0.0f);
  for (std::int64_t iy = 0; iy < c.h; ++iy)
    std::memcpy(scratch.data() + (iy + c.pad_top) * t.row + c.pad_left * c.c, xn + iy * c.w * c.c,
                static_cast<std::size_t>(c.w * c.c) * sizeof(float));
  return scratch.data();
}

__mmask16 lanes_from(std::int64_t o0, std::int64_t oc) {
  return oc - o0 >= kLanes ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (oc - o0)) - 1u);
}

// Blocks of 16 filters a pass takes: two where their taps fit in registers beside the sums
// (each broadcast input then feeds two FMAs), else one.
template <int K>
constexpr int kBlocks = K <= 11 ? 2 : 1;

// The lanes of block b of the pass starting at filter o0 (none past the last filter).
__mmask16 block_lanes(std::int64_t o0, int b, std::int64_t oc) {
  const std::int64_t first = o0 + b * kLanes;
  return first < oc ? lanes_from(first, oc) : __mmask16(0);
}

// One example: y and arg of every pooling window, kBlocks<K> * 16 filters at a time.
template <int K>
void forward_example(const Conv2dDesc& c, const Pool2dDesc& p, const Taps& t, const float* xp, const float* w,
                     const float* bias, float* yn, std::uint8_t* an) {
  constexpr int B = kBlocks<K>;
  const std::int64_t oc = c.oc, window = p.kh * p.kw;
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (std::int64_t o0 = 0; o0 < oc; o0 += B * kLanes) {
    __mmask16 lanes[B];
    __m512 wv[B][K], bv[B];
    for (int b = 0; b < B; ++b) {
      lanes[b] = block_lanes(o0, b, oc);
      for (int k = 0; k < K; ++k) wv[b][k] = _mm512_maskz_loadu_ps(lanes[b], w + k * oc + o0 + b * kLanes);
      bv[b] = bias ? _mm512_maskz_loadu_ps(lanes[b], bias + o0 + b * kLanes) : _mm512_setzero_ps();
    }
    for (std::int64_t py = 0; py < p.oh; ++py) {
      for (std::int64_t px = 0; px < p.ow; ++px) {
        __m512 best[B];
        __m512i arg[B];
        for (int b = 0; b < B; ++b) best[b] = lowest, arg[b] = _mm512_setzero_si512();
        const float* corner = xp + py * p.kh * t.row + px * p.kw * c.c;
        // The window's elements kGroup at a time: independent sums, so the FMAs of one do not
        // wait for the last (a single chain of K FMAs ran at a quarter of the FMA rate).
        for (std::int64_t q0 = 0; q0 < window; q0 += kGroup) {
          const float* base[kGroup];
          for (int j = 0; j < kGroup; ++j) {
            const std::int64_t q = std::min(q0 + j, window - 1);  // past the end: the last again
            base[j] = corner + t.element[static_cast<std::size_t>(q)];
          }
          __m512 acc[B][kGroup];
          for (int b = 0; b < B; ++b)
            for (int j = 0; j < kGroup; ++j) acc[b][j] = bv[b];
          for (int k = 0; k < K; ++k)
            for (int j = 0; j < kGroup; ++j) {
              const __m512 xv = _mm512_set1_ps(base[j][t.offset[k]]);
              for (int b = 0; b < B; ++b) acc[b][j] = _mm512_fmadd_ps(xv, wv[b][k], acc[b][j]);
            }
          for (int j = 0; j < kGroup && q0 + j < window; ++j) {
            const __m512i q = _mm512_set1_epi32(static_cast<int>(q0 + j));
            for (int b = 0; b < B; ++b) {
              // The first maximum wins (later equal ones do not), and so does a NaN, once.
              const __mmask16 ordered = _mm512_cmp_ps_mask(best[b], best[b], _CMP_ORD_Q);
              const __mmask16 wins = _mm512_mask_cmp_ps_mask(ordered, acc[b][j], best[b], _CMP_NLE_UQ);
              best[b] = _mm512_mask_mov_ps(best[b], wins, acc[b][j]);
              arg[b] = _mm512_mask_mov_epi32(arg[b], wins, q);
            }
          }
        }
        const std::int64_t i = (py * p.ow + px) * oc + o0;
        for (int b = 0; b < B; ++b) {
          // relu(max) == max(relu), by kernels.hpp's relu_of: v <= 0 gives +0, -0 included (a
          // `< 0` kept -0, where the unfused Conv2D's ReLU gives +0); a NaN stays NaN (an ordered
          // compare is false for it).
          if (c.relu)
            best[b] = _mm512_mask_mov_ps(best[b], _mm512_cmp_ps_mask(best[b], _mm512_setzero_ps(), _CMP_LE_OQ),
                                         _mm512_setzero_ps());
          _mm512_mask_storeu_ps(yn + i + b * kLanes, lanes[b], best[b]);
          _mm512_mask_cvtepi32_storeu_epi8(an + i + b * kLanes, lanes[b], arg[b]);
        }
      }
    }
  }
}

// One example's kernel gradient (added to dw) and bias gradient (added to db), kBlocks<K> * 16
// filters at a time, summed over the example in registers first.
template <int K>
void backward_example(const Conv2dDesc& c, const Pool2dDesc& p, const Taps& t, const float* xp, const float* yn,
                      const std::uint8_t* an, const float* dyn, float* dw, float* db) {
  constexpr int B = kBlocks<K>;
  const std::int64_t oc = c.oc, window = p.kh * p.kw;
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t o0 = 0; o0 < oc; o0 += B * kLanes) {
    __mmask16 lanes[B];
    __m512 acc[B][K], bacc[B];
    for (int b = 0; b < B; ++b) {
      lanes[b] = block_lanes(o0, b, oc);
      for (int k = 0; k < K; ++k) acc[b][k] = zero;
      bacc[b] = zero;
    }
    for (std::int64_t py = 0; py < p.oh; ++py) {
      for (std::int64_t px = 0; px < p.ow; ++px) {
        const std::int64_t i = (py * p.ow + px) * oc + o0;
        __m512 g[B];
        __m512i arg[B];
        for (int b = 0; b < B; ++b) {
          const std::int64_t ib = i + b * kLanes;
          g[b] = _mm512_maskz_loadu_ps(lanes[b], dyn + ib);
          if (p.relu_input)
            g[b] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lanes[b], yn + ib), zero, _CMP_GT_OQ), g[b]);
          bacc[b] = _mm512_add_ps(bacc[b], g[b]);
          arg[b] = _mm512_maskz_cvtepu8_epi32(lanes[b], _mm_maskz_loadu_epi8(lanes[b], an + ib));
        }
        const float* corner = xp + py * p.kh * t.row + px * p.kw * c.c;
        for (std::int64_t q = 0; q < window; ++q) {
          const __m512i qv = _mm512_set1_epi32(static_cast<int>(q));
          __m512 gq[B];
          __mmask16 any = 0;
          for (int b = 0; b < B; ++b) {
            const __mmask16 hit = _mm512_mask_cmpeq_epi32_mask(lanes[b], arg[b], qv);
            gq[b] = _mm512_maskz_mov_ps(hit, g[b]);
            any = static_cast<__mmask16>(any | hit);
          }
          if (any == 0) continue;
          const float* base = corner + t.element[static_cast<std::size_t>(q)];
          for (int k = 0; k < K; ++k) {
            const __m512 xv = _mm512_set1_ps(base[t.offset[k]]);
            for (int b = 0; b < B; ++b) acc[b][k] = _mm512_fmadd_ps(xv, gq[b], acc[b][k]);
          }
        }
      }
    }
    for (int b = 0; b < B; ++b) {
      const std::int64_t ob = o0 + b * kLanes;
      for (int k = 0; k < K; ++k) {
        float* out = dw + k * oc + ob;
        _mm512_mask_storeu_ps(out, lanes[b], _mm512_add_ps(_mm512_maskz_loadu_ps(lanes[b], out), acc[b][k]));
      }
      if (db) _mm512_mask_storeu_ps(db + ob, lanes[b], _mm512_add_ps(_mm512_maskz_loadu_ps(lanes[b], db + ob), bacc[b]));
    }
  }
}

using ForwardFn = void (*)(const Conv2dDesc&, const Pool2dDesc&, const Taps&, const float*, const float*,
                           const float*, float*, std::uint8_t*);
using BackwardFn = void (*)(const Conv2dDesc&, const Pool2dDesc&, const Taps&, const float*, const float*,
                            const std::uint8_t*, const float*, float*, float*);
template <std::size_t... I>
constexpr std::array<ForwardFn, sizeof...(I)> forward_fns(std::index_sequence<I...>) {
  return {&forward_example<static_cast<int>(I) + 1>...};
}
template <std::size_t... I>
constexpr std::array<BackwardFn, sizeof...(I)> backward_fns(std::index_sequence<I...>) {
  return {&backward_example<static_cast<int>(I) + 1>...};
}
constexpr auto kForward = forward_fns(std::make_index_sequence<kMaxFusedConvTaps>());
constexpr auto kBackward = backward_fns(std::make_index_sequence<kMaxFusedConvTaps>());

double fused_flops(const Conv2dDesc& c, const Pool2dDesc& p) {
  return 2.0 * static_cast<double>(c.n * p.oh * p.ow * p.kh * p.kw * c.oc * c.kh * c.kw * c.c);
}
}  // namespace

void conv2d_max_pool2d(ComputeContext& ctx, const Conv2dDesc& c, const Pool2dDesc& p, const void* x, const void* w,
                       const void* bias, void* y, std::uint8_t* arg) {
  const Taps t = taps_of(c, p);
  const ForwardFn fn = kForward[static_cast<std::size_t>(t.count - 1)];
  const auto* xs = static_cast<const float*>(x);
  auto* ys = static_cast<float*>(y);
  const std::int64_t per_y = p.oh * p.ow * c.oc;
  BatchParts(ctx, c.n, fused_flops(c, p)).run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
    thread_local std::vector<float> scratch;
    for (std::int64_t n = n0; n < n1; ++n)
      fn(c, p, t, example(c, t, xs, n, scratch), static_cast<const float*>(w), static_cast<const float*>(bias),
         ys + n * per_y, arg + n * per_y);
  });
}

void conv2d_max_pool2d_backward_weights(ComputeContext& ctx, const Conv2dDesc& c, const Pool2dDesc& p, const void* x,
                                        const void* y, const std::uint8_t* arg, const void* dy, void* dw, void* db) {
  const Taps t = taps_of(c, p);
  const BackwardFn fn = kBackward[static_cast<std::size_t>(t.count - 1)];
  const std::int64_t wn = t.count * c.oc, bn = db ? c.oc : 0, per_y = p.oh * p.ow * c.oc;
  const BatchParts parts(ctx, c.n, fused_flops(c, p));
  // Each example adds to its part's sums, so they start at zero.
  const PartSums sums(parts, wn, bn, dw, db);
  std::fill_n(static_cast<float*>(dw), wn, 0.0f);
  if (db) std::fill_n(static_cast<float*>(db), bn, 0.0f);
  const auto* xs = static_cast<const float*>(x);
  const auto* ys = static_cast<const float*>(y);
  const auto* dys = static_cast<const float*>(dy);
  parts.run(ctx, [&](std::int64_t part, std::int64_t n0, std::int64_t n1) {
    thread_local std::vector<float> scratch;
    for (std::int64_t n = n0; n < n1; ++n)
      fn(c, p, t, example(c, t, xs, n, scratch), ys + n * per_y, arg + n * per_y, dys + n * per_y,
         sums.weights(part), sums.bias(part));
  });
  sums.finish();
}

void max_unpool2d(ComputeContext& ctx, const Pool2dDesc& p, const void* y, const std::uint8_t* arg, const void* dy,
                  void* dx) {
  const auto* ys = static_cast<const float*>(y);
  const auto* dys = static_cast<const float*>(dy);
  auto* dxs = static_cast<float*>(dx);
  const std::int64_t c = p.c, per_x = p.h * p.w * c, per_y = p.oh * p.ow * c;
  const BatchParts parts(ctx, p.n, BatchParts::memory_bound(static_cast<double>(p.n * (per_x + 2 * per_y))));
  parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
    for (std::int64_t n = n0; n < n1; ++n) {
      float* dxn = dxs + n * per_x;
      std::fill_n(dxn, per_x, 0.0f);
      for (std::int64_t py = 0; py < p.oh; ++py)
        for (std::int64_t px = 0; px < p.ow; ++px)
          for (std::int64_t ch = 0; ch < c; ++ch) {
            const std::int64_t i = n * per_y + (py * p.ow + px) * c + ch;
            if (p.relu_input && !(ys[i] > 0.0f)) continue;
            const std::int64_t a = arg[i], iy = py * p.kh + a / p.kw, ix = px * p.kw + a % p.kw;
            dxn[(iy * p.w + ix) * c + ch] = dys[i];
          }
    }
  });
}

}  // namespace lockstep::backend::cpu

#endif  // LOCKSTEP_CPU_CONV_MAX_POOL
