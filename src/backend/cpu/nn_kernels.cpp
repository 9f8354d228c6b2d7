// Reductions, softmax, the fused bias + ReLU, cross-entropy, dropout (its mask and product) and
// random_fill (dropout's generator's uniform and normal draws).
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/vec_math.hpp"
#include "backend/dropout_rng.hpp"

namespace lockstep::backend::cpu {

namespace {
// The sum of a row: a float32 row of kLanes elements or more in kLanes running sums (element a
// into sum a % kLanes) added in lane order at the end, so that it is one chain of dependent adds
// per lane instead of one for the row (LayerNormalization's means over each row of features);
// a shorter row, and any other dtype, in one running sum.
template <typename F>
float row_sum(const F* p, std::int64_t n) {
  if constexpr (std::is_same_v<F, float>) {
    if (n >= vec::kLanes) {
      vec::Vec acc{};
      std::int64_t a = 0;
      for (; a + vec::kLanes <= n; a += vec::kLanes) acc += vec::load(p + a);
      if (a < n) {
        float tail[vec::kLanes] = {};
        for (std::int64_t k = 0; a + k < n; ++k) tail[k] = p[a + k];
        acc += vec::load(tail);
      }
      return vec::sum(acc);
    }
  }
  float s = 0.0f;
  for (std::int64_t a = 0; a < n; ++a) s += Elem<F>::load(p[a]);
  return s;
}
}  // namespace

template <typename F>
void reduce_sum(ComputeContext& ctx, const void* xv, void* outv, std::int64_t outer, std::int64_t axis,
                std::int64_t inner, float post_scale) {
  using E = Elem<F>;
  const F* x = static_cast<const F*>(xv);
  F* out = static_cast<F*>(outv);
  if (inner == 1) {
    parallel_rows(ctx, outer, axis, [=](std::int64_t b, std::int64_t e) {
      for (auto o = b; o < e; ++o) {
        const float s = row_sum(x + o * axis, axis);
        out[o] = E::store(post_scale == 1.0f ? s : s * post_scale);
      }
    });
    return;
  }
  // Parallel over `inner` columns so each output keeps one summation order; the partial sums
  // are float32 whatever F is.
  for (std::int64_t o = 0; o < outer; ++o) {
    const F* xo = x + o * axis * inner;
    F* oo = out + o * inner;
    parallel_rows(ctx, inner, axis, [=](std::int64_t b, std::int64_t e) {
      constexpr std::int64_t kBlock = 256;
      float acc[kBlock];
      for (std::int64_t s = b; s < e; s += kBlock) {
        const std::int64_t len = std::min(kBlock, e - s);
        for (std::int64_t i = 0; i < len; ++i) acc[i] = 0.0f;
        for (std::int64_t a = 0; a < axis; ++a) {
          const F* row = xo + a * inner + s;
          for (std::int64_t i = 0; i < len; ++i) acc[i] += E::load(row[i]);
        }
        for (std::int64_t i = 0; i < len; ++i) oo[s + i] = E::store(post_scale == 1.0f ? acc[i] : acc[i] * post_scale);
      }
    });
  }
}

template <typename F>
void reduce_max(ComputeContext&, const void* xv, void* outv, std::int64_t* arg_out, std::int64_t outer,
                std::int64_t axis, std::int64_t inner) {
  using E = Elem<F>;
  const F* x = static_cast<const F*>(xv);
  F* out = static_cast<F*>(outv);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      const F* p = x + o * axis * inner + i;
      float best = E::load(p[0]);
      std::int64_t arg = 0;
      for (std::int64_t a = 1; a < axis && !std::isnan(best); ++a) {
        const float v = E::load(p[a * inner]);
        if (v > best || std::isnan(v)) {  // NaN wins, as in numpy
          best = v;
          arg = a;
        }
      }
      if (out) out[o * inner + i] = E::store(best);
      if (arg_out) arg_out[o * inner + i] = arg;
    }
  }
}

template <typename F>
void reduce_max_backward(ComputeContext&, const std::int64_t* arg, const void* gv, void* dxv, std::int64_t outer,
                         std::int64_t axis, std::int64_t inner) {
  const F* g = static_cast<const F*>(gv);
  F* dx = static_cast<F*>(dxv);
  const F zero = Elem<F>::store(0.0f);
  for (std::int64_t i = 0, n = outer * axis * inner; i < n; ++i) dx[i] = zero;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) dx[(o * axis + arg[o * inner + i]) * inner + i] = g[o * inner + i];
}

namespace {
// One row of softmax (log_softmax when `log`): softmax's bits, which softmax_sparse_xent's output shares.
template <typename F>
void softmax_row(const F* xr, F* yr, std::int64_t cols, bool log) {
  using E = Elem<F>;
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, E::load(xr[c]));
  float s = 0.0f;
  for (std::int64_t c = 0; c < cols; ++c) s += std::exp(E::load(xr[c]) - m);
  if (log) {
    const float lse = m + std::log(s);
    for (std::int64_t c = 0; c < cols; ++c) yr[c] = E::store(E::load(xr[c]) - lse);
  } else {
    const float inv = 1.0f / s;
    for (std::int64_t c = 0; c < cols; ++c) yr[c] = E::store(std::exp(E::load(xr[c]) - m) * inv);
  }
}
}  // namespace

template <typename F>
void softmax(ComputeContext& ctx, const void* xv, void* yv, std::int64_t rows, std::int64_t cols, bool log) {
  const F* x = static_cast<const F*>(xv);
  F* y = static_cast<F*>(yv);
  parallel_rows(ctx, rows, cols * 4, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) softmax_row(x + r * cols, y + r * cols, cols, log);
  });
}

template <typename F>
void softmax_backward(ComputeContext& ctx, const void* yv, const void* dyv, void* dxv, std::int64_t rows,
                      std::int64_t cols, bool log) {
  using E = Elem<F>;
  const F* y = static_cast<const F*>(yv);
  const F* dy = static_cast<const F*>(dyv);
  F* dx = static_cast<F*>(dxv);
  parallel_rows(ctx, rows, cols * 3, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const F* yr = y + r * cols;
      const F* gr = dy + r * cols;
      F* dr = dx + r * cols;
      float s = 0.0f;
      if (log) {
        for (std::int64_t c = 0; c < cols; ++c) s += E::load(gr[c]);
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = E::store(E::load(gr[c]) - std::exp(E::load(yr[c])) * s);
      } else {
        for (std::int64_t c = 0; c < cols; ++c) s += E::load(gr[c]) * E::load(yr[c]);
        for (std::int64_t c = 0; c < cols; ++c) dr[c] = E::store(E::load(yr[c]) * (E::load(gr[c]) - s));
      }
    }
  });
}

// The CPU's launches cost nothing: the two kernels, one after the other.
template <typename F>
void relu_backward_bias_grad(ComputeContext& ctx, const void* y, const void* g, void* dx, void* db, std::int64_t rows,
                             std::int64_t cols) {
  unary_backward<F>(ctx, UnaryOp::kRelu, y, y, g, dx, rows * cols, 0.0f, 0.0f);
  reduce_sum<F>(ctx, dx, db, 1, rows, cols, 1.0f);
}

namespace {
// y[r, c] += bias[c], then relu when `relu`; bias may be null (gemm_bias_activation's second half).
template <typename F>
void bias_activation(ComputeContext& ctx, void* yv, const void* biasv, std::int64_t rows, std::int64_t cols,
                     bool relu) {
  using E = Elem<F>;
  F* y = static_cast<F*>(yv);
  const F* bias = static_cast<const F*>(biasv);
  parallel_rows(ctx, rows, cols, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      F* yr = y + r * cols;
      if (bias && relu) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = E::store(relu_of(E::load(yr[c]) + E::load(bias[c])));
      } else if (bias) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = E::store(E::load(yr[c]) + E::load(bias[c]));
      } else if (relu) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = E::store(relu_of(E::load(yr[c])));
      }
    }
  });
}
}  // namespace

// The CPU's launches cost nothing and its GEMM has no epilogue: the two kernels, one after the other.
template <typename F>
void gemm_bias_activation(ComputeContext& ctx, const void* x, const void* w, const void* bias, void* y, std::int64_t m,
                          std::int64_t n, std::int64_t k, bool relu) {
  gemm<F>(ctx, false, false, m, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
  bias_activation<F>(ctx, y, bias, m, n, relu);
}

namespace {
// out[c] = exp(x[c] - m) for c < n, a vector at a time (m is the row's maximum, so every
// argument is <= 0: vec::exp's range); returns their sum, in kLanes running sums added in lane
// order. The last partial vector is padded with -inf, whose exp is 0.
float exp_shifted(const float* x, float m, float* out, std::int64_t n) {
  constexpr int kL = vec::kLanes;
  vec::Vec acc{};
  std::int64_t c = 0;
  for (; c + kL <= n; c += kL) {
    const vec::Vec e = vec::exp(vec::load(x + c) - m);
    vec::store(out + c, e);
    acc += e;
  }
  if (c < n) {
    float buf[kL];
    for (int k = 0; k < kL; ++k) buf[k] = c + k < n ? x[c + k] : -std::numeric_limits<float>::infinity();
    const vec::Vec e = vec::exp(vec::load(buf) - m);
    vec::store(buf, e);
    for (std::int64_t k = 0; c + k < n; ++k) out[c + k] = buf[k];
    acc += e;
  }
  return vec::sum(acc);
}

// One row of sparse_softmax_xent: its probabilities into pr, its loss returned.
float xent_row(const float* xr, std::int64_t label, float* pr, std::int64_t cols) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
  const float s = exp_shifted(xr, m, pr, cols);
  const float inv = 1.0f / s;
  for (std::int64_t c = 0; c < cols; ++c) pr[c] *= inv;
  return inside(label, cols) ? -(xr[label] - m - std::log(s)) : 0.0f;  // outside: raised later
}
}  // namespace

void sparse_softmax_xent(ComputeContext& ctx, const void* logitsv, const std::int64_t* labels, void* lossv,
                         void* probsv, std::int64_t rows, std::int64_t cols) {
  const float* logits = static_cast<const float*>(logitsv);
  float* loss = static_cast<float*>(lossv);
  float* probs = static_cast<float*>(probsv);
  parallel_rows(ctx, rows, cols * 4, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) loss[r] = xent_row(logits + r * cols, labels[r], probs + r * cols, cols);
  });
}

// The CPU's softmax and cross-entropy sum their exponentials differently (a scalar sum, vector
// lanes), so each row runs both: y as softmax, loss and probs as sparse_softmax_xent.
void softmax_sparse_xent(ComputeContext& ctx, const void* logitsv, const std::int64_t* labels, void* lossv,
                         void* probsv, void* yv, std::int64_t rows, std::int64_t cols) {
  const float* logits = static_cast<const float*>(logitsv);
  float* loss = static_cast<float*>(lossv);
  float* probs = static_cast<float*>(probsv);
  float* y = static_cast<float*>(yv);
  parallel_rows(ctx, rows, cols * 8, [=](std::int64_t b, std::int64_t e) {
    std::vector<float> scratch(probs ? 0 : static_cast<std::size_t>(cols));
    for (auto r = b; r < e; ++r) {
      softmax_row(logits + r * cols, y + r * cols, cols, false);
      loss[r] = xent_row(logits + r * cols, labels[r], probs ? probs + r * cols : scratch.data(), cols);
    }
  });
}

void sparse_softmax_xent_backward(ComputeContext& ctx, const void* probsv, const std::int64_t* labels,
                                  const void* gv, void* dv, std::int64_t rows, std::int64_t cols) {
  const float* p = static_cast<const float*>(probsv);
  const float* g = static_cast<const float*>(gv);
  float* d = static_cast<float*>(dv);
  parallel_rows(ctx, rows, cols, [=](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) {
      const bool in = inside(labels[i], cols);  // a row whose label is outside: no gradient
      for (std::int64_t c = 0; c < cols; ++c) d[i * cols + c] = in ? p[i * cols + c] * g[i] : 0.0f;
      if (in) d[i * cols + labels[i]] -= g[i];
    }
  });
}

void one_hot(ComputeContext&, const std::int64_t* labels, std::int64_t rows, std::int64_t classes, void* outv) {
  float* out = static_cast<float*>(outv);
  std::memset(out, 0, static_cast<std::size_t>(rows * classes) * sizeof(float));
  for (std::int64_t i = 0; i < rows; ++i)
    if (inside(labels[i], classes)) out[i * classes + labels[i]] = 1.0f;
}

// The mask is in the activations' dtype (a 16-bit mask rounds 1 / (1 - rate) once, as TF's does),
// and y is x times it as binary's kMul computes it (a dropped inf or NaN gives NaN).
template <typename F>
void dropout(ComputeContext& ctx, const void* xv, void* yv, void* maskv, std::int64_t rows, std::int64_t cols,
             float rate, std::uint64_t seed, std::uint64_t stream, std::uint64_t step, const std::int64_t* step_at,
             std::int64_t first_row) {
  using E = Elem<F>;
  const F* x = static_cast<const F*>(xv);
  F* y = static_cast<F*>(yv);
  F* mask = static_cast<F*>(maskv);
  const F keep_scale = E::store(1.0f / (1.0f - rate));
  const F zero = E::store(0.0f);
  const float keep = E::load(keep_scale), drop = E::load(zero);
  const std::uint32_t threshold = dropout::threshold(rate);
  const std::uint64_t key = dropout::step_key(seed, stream, step, step_at);
  parallel_rows(ctx, rows, cols * 3, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const std::uint64_t row_key = dropout::row_key(key, first_row + r);
      const std::int64_t at = r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const bool dropped = dropout::dropped(row_key, c, threshold);
        if (mask) mask[at + c] = dropped ? zero : keep_scale;
        y[at + c] = E::store(E::load(x[at + c]) * (dropped ? drop : keep));
      }
    }
  });
}

// Each unit's draw in float32 (dropout_rng.hpp), stored in the dtype (rounded once).
template <typename F>
void random_fill(ComputeContext& ctx, void* outv, std::int64_t rows, std::int64_t cols, RandomDistribution distribution,
                 std::uint64_t seed, std::uint64_t stream, std::uint64_t step, const std::int64_t* step_at,
                 std::int64_t first_row) {
  using E = Elem<F>;
  F* out = static_cast<F*>(outv);
  const std::uint64_t key = dropout::step_key(seed, stream, step, step_at);
  const bool normal = distribution == RandomDistribution::kStandardNormal;
  parallel_rows(ctx, rows, cols * (normal ? 40 : 3), [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const std::uint64_t row_key = dropout::row_key(key, first_row + r);
      F* row = out + r * cols;
      if (normal)
        for (std::int64_t c = 0; c < cols; ++c) row[c] = E::store(dropout::standard_normal(row_key, c));
      else
        for (std::int64_t c = 0; c < cols; ++c) row[c] = E::store(dropout::uniform(row_key, c));
    }
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, reduce_sum)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, reduce_max)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, reduce_max_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, softmax)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, softmax_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, gemm_bias_activation)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, relu_backward_bias_grad)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, dropout)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, random_fill)

}  // namespace lockstep::backend::cpu
