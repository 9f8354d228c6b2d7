#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
template <typename F>
void parallel_rows(ComputeContext& ctx, std::int64_t rows, std::int64_t cost_per_row, F&& f) {
  const std::int64_t grain = std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(1, cost_per_row));
  if (ctx.threads() == 1 || rows < 2 * grain) {
    f(std::int64_t{0}, rows);
  } else {
    ctx.pool().parallel_for(rows, grain, f);
  }
}
}  // namespace

void reduce_sum(ComputeContext& ctx, const float* x, float* out, std::int64_t outer, std::int64_t axis,
                std::int64_t inner) {
  if (inner == 1) {
    parallel_rows(ctx, outer, axis, [=](std::int64_t b, std::int64_t e) {
      for (auto o = b; o < e; ++o) {
        const float* p = x + o * axis;
        float s = 0.0f;
        for (std::int64_t a = 0; a < axis; ++a) s += p[a];
        out[o] = s;
      }
    });
    return;
  }
  // Parallel over `inner` columns so each output keeps one summation order.
  for (std::int64_t o = 0; o < outer; ++o) {
    const float* xo = x + o * axis * inner;
    float* oo = out + o * inner;
    parallel_rows(ctx, inner, axis, [=](std::int64_t b, std::int64_t e) {
      for (auto i = b; i < e; ++i) oo[i] = 0.0f;
      for (std::int64_t a = 0; a < axis; ++a) {
        const float* row = xo + a * inner;
        for (auto i = b; i < e; ++i) oo[i] += row[i];
      }
    });
  }
}

void reduce_max(ComputeContext&, const float* x, float* out, std::int64_t* argmax, std::int64_t outer,
                std::int64_t axis, std::int64_t inner) {
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const float* p = x + o * axis * inner + i;
      float best = p[0];
      std::int64_t arg = 0;
      for (std::int64_t a = 1; a < axis && !std::isnan(best); ++a) {
        const float v = p[a * inner];
        if (v > best || std::isnan(v)) {  // NaN wins, as in numpy
          best = v;
          arg = a;
        }
      }
      if (out) out[o * inner + i] = best;
      if (argmax) argmax[o * inner + i] = arg;
    }
  }
}

void softmax(ComputeContext& ctx, const float* x, float* y, std::int64_t rows, std::int64_t cols, bool log) {
  parallel_rows(ctx, rows, cols * 4, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
      float s = 0.0f;
      for (std::int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
      if (log) {
        const float lse = m + std::log(s);
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
      } else {
        const float inv = 1.0f / s;
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = std::exp(xr[c] - m) * inv;
      }
    }
  });
}

void softmax_backward(ComputeContext& ctx, const float* y, const float* dy, float* dx, std::int64_t rows,
                      std::int64_t cols, bool log) {
  parallel_rows(ctx, rows, cols * 3, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const float* yr = y + r * cols;
      const float* gr = dy + r * cols;
      float* dr = dx + r * cols;
      float s = 0.0f;
      if (log) {
        for (std::int64_t c = 0; c < cols; ++c) s += gr[c];
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = gr[c] - std::exp(yr[c]) * s;
      } else {
        for (std::int64_t c = 0; c < cols; ++c) s += gr[c] * yr[c];
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = yr[c] * (gr[c] - s);
      }
    }
  });
}

void bias_activation(ComputeContext& ctx, float* y, const float* bias, std::int64_t rows, std::int64_t cols,
                     bool relu) {
  parallel_rows(ctx, rows, cols, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      float* yr = y + r * cols;
      if (bias && relu) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = std::max(yr[c] + bias[c], 0.0f);
      } else if (bias) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] += bias[c];
      } else if (relu) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = std::max(yr[c], 0.0f);
      }
    }
  });
}

void sparse_softmax_xent(ComputeContext& ctx, const float* logits, const std::int64_t* labels, float* loss,
                         float* probs, std::int64_t rows, std::int64_t cols) {
  parallel_rows(ctx, rows, cols * 4, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const float* xr = logits + r * cols;
      float* pr = probs + r * cols;
      float m = -std::numeric_limits<float>::infinity();
      for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
      float s = 0.0f;
      for (std::int64_t c = 0; c < cols; ++c) {
        pr[c] = std::exp(xr[c] - m);
        s += pr[c];
      }
      const float inv = 1.0f / s;
      for (std::int64_t c = 0; c < cols; ++c) pr[c] *= inv;
      loss[r] = -(xr[labels[r]] - m - std::log(s));
    }
  });
}

namespace {
// A counter-based generator (SplitMix64 finaliser cascaded over the key words): the value
// depends only on the key, so masks are identical however rows are split or threaded.
inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

void dropout_mask(ComputeContext& ctx, float* mask, std::int64_t rows, std::int64_t cols, float rate,
                  std::uint64_t seed, std::uint64_t stream, std::uint64_t step, std::int64_t first_row) {
  const float keep_scale = 1.0f / (1.0f - rate);
  // Threshold on 24 random bits: P(drop) = rate to 2^-24.
  const std::uint32_t threshold = static_cast<std::uint32_t>(static_cast<double>(rate) * 16777216.0);
  const std::uint64_t base = mix(mix(mix(seed + 0x9e3779b97f4a7c15ULL) ^ stream) ^ step);
  parallel_rows(ctx, rows, cols * 2, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const std::uint64_t row_key = mix(base ^ static_cast<std::uint64_t>(first_row + r));
      float* mr = mask + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const auto bits = static_cast<std::uint32_t>(mix(row_key + static_cast<std::uint64_t>(c)) >> 40);
        mr[c] = bits < threshold ? 0.0f : keep_scale;
      }
    }
  });
}

// Declared in the other CPU translation units.
void gemm(ComputeContext&, bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*,
          std::int64_t, const float*, std::int64_t, float, float*, std::int64_t);
void unary(ComputeContext&, UnaryOp, const float*, float*, std::int64_t, float, float);
void unary_backward(ComputeContext&, UnaryOp, const float*, const float*, const float*, float*, std::int64_t,
                    float, float);
void binary(ComputeContext&, BinaryOp, const BroadcastDesc&, const float*, const float*, float*);

const KernelTable& table() {
  static const KernelTable t{gemm,       unary,           unary_backward,    binary,          reduce_sum,
                             reduce_max, softmax,         softmax_backward,  bias_activation, sparse_softmax_xent,
                             dropout_mask};
  return t;
}

}  // namespace lockstep::backend::cpu
