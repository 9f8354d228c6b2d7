// Reductions, softmax, cross-entropy, one-hot, the dropout mask and random_fill's draws, batch and
// layer normalisation. Every reduction has a fixed order (per-lane strided partials, then a fixed
// shuffle tree; column sums in row order), so a kernel gives the same bits on every run; no atomics.
#include <limits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/dropout_rng.hpp"

namespace lockstep::backend::cuda {

namespace {
// ---- reduce_sum ----
template <typename F>
__global__ void row_sum_kernel(const F* x, F* out, std::int64_t rows, std::int64_t axis, float post_scale) {
  const int lane = threadIdx.x % 32;
  LOCKSTEP_WARP_ROW_LOOP(r, rows) {
    const F* p = x + r * axis;
    float s = 0.0f;
    for (std::int64_t a = lane; a < axis; a += 32) s += Elem<F>::load(p[a]);
    s = warp_sum(s);
    if (lane == 0) out[r] = Elem<F>::store(post_scale == 1.0f ? s : s * post_scale);
  }
}

// Few long rows: a block per row, its 256 partials added in a fixed tree.
template <typename F>
__global__ void long_row_sum_kernel(const F* x, F* out, std::int64_t axis, float post_scale) {
  __shared__ float part[kThreads / 32];
  const F* p = x + static_cast<std::int64_t>(blockIdx.x) * axis;
  float s = 0.0f;
  for (std::int64_t a = threadIdx.x; a < axis; a += kThreads) s += Elem<F>::load(p[a]);
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) t += part[w];
    out[blockIdx.x] = Elem<F>::store(post_scale == 1.0f ? t : t * post_scale);
  }
}

// Columns: partial sums of `seg` consecutive rows of the axis per thread (float32), then the
// partials of each column added in segment order. Enough segments to fill the GPU when there
// are few columns (reduce_sum's and batch normalisation's rule).
std::int64_t column_segments(std::int64_t cols, std::int64_t axis) {
  std::int64_t segs = 1;
  while (cols * segs < 65536 && axis / (segs * 2) >= 16) segs *= 2;
  return segs;
}
template <typename F>
__global__ void column_partial_kernel(const F* x, float* part, std::int64_t outer, std::int64_t axis,
                                      std::int64_t inner, std::int64_t segs, std::int64_t seg) {
  LOCKSTEP_GRID_LOOP(t, outer * inner * segs) {
    const std::int64_t col = t % (outer * inner), s = t / (outer * inner);
    const std::int64_t o = col / inner, i = col - o * inner;
    const F* p = x + o * axis * inner + i;
    const std::int64_t a0 = s * seg, a1 = a0 + seg < axis ? a0 + seg : axis;
    float acc = 0.0f;
    for (std::int64_t a = a0; a < a1; ++a) acc += Elem<F>::load(p[a * inner]);
    part[t] = acc;
  }
}
template <typename F>
__global__ void column_finish_kernel(const float* part, F* out, std::int64_t cols, std::int64_t segs,
                                     float post_scale) {
  LOCKSTEP_GRID_LOOP(c, cols) {
    float acc = 0.0f;
    for (std::int64_t s = 0; s < segs; ++s) acc += part[s * cols + c];
    out[c] = Elem<F>::store(post_scale == 1.0f ? acc : acc * post_scale);
  }
}

// relu_backward_bias_grad: column_partial_kernel's sums (outer 1) of the dx it writes as
// unary_backward_kernel's kRelu computes it, each element by the thread that adds it.
template <typename F>
__global__ void relu_backward_partial_kernel(const F* y, const F* g, F* dx, float* part, std::int64_t rows,
                                             std::int64_t cols, std::int64_t segs, std::int64_t seg) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(t, cols * segs) {
    const std::int64_t c = t % cols, s = t / cols;
    const std::int64_t a0 = s * seg, a1 = a0 + seg < rows ? a0 + seg : rows;
    float acc = 0.0f;
    for (std::int64_t a = a0; a < a1; ++a) {
      const std::int64_t i = a * cols + c;
      const F d = E::store(E::load(y[i]) > 0.0f ? E::load(g[i]) : 0.0f);
      dx[i] = d;
      acc += E::load(d);
    }
    part[t] = acc;
  }
}

// ---- batch normalisation (float32) ----
// Per-channel sums as reduce_sum's columns: each thread sums `seg` consecutive rows of one
// channel (in double), then each channel's partials are added in segment order. part holds
// [sums][segs][cols].
__global__ void batch_norm_partial_kernel(const float* x, const float* mean, const float* dy, const float* inv_std,
                                          double* part, std::int64_t rows, std::int64_t cols, std::int64_t segs,
                                          std::int64_t seg) {
  LOCKSTEP_GRID_LOOP(t, cols * segs) {
    const std::int64_t c = t % cols, s = t / cols;
    const std::int64_t r0 = s * seg, r1 = r0 + seg < rows ? r0 + seg : rows;
    const float m = mean[c];
    double a = 0.0, b = 0.0;
    if (!dy) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const float d = x[r * cols + c] - m;
        a += static_cast<double>(d) * d;
      }
    } else {
      const float is = inv_std[c];
      for (std::int64_t r = r0; r < r1; ++r) {
        const float g = dy[r * cols + c];
        const float xhat = (x[r * cols + c] - m) * is;
        a += g;
        b += static_cast<double>(g * xhat);
      }
      part[cols * segs + t] = b;
    }
    part[t] = a;
  }
}
__global__ void batch_norm_finish_kernel(const double* part, float* out, std::int64_t cols, std::int64_t segs,
                                         std::int64_t sums) {
  LOCKSTEP_GRID_LOOP(i, cols * sums) {
    const std::int64_t k = i / cols, c = i - k * cols;
    const double* p = part + k * cols * segs;
    double acc = 0.0;
    for (std::int64_t s = 0; s < segs; ++s) acc += p[s * cols + c];
    out[i] = static_cast<float>(acc);
  }
}
__global__ void batch_norm_apply_kernel(const float* x, const float* mean, const float* scale, const float* offset,
                                        float* y, std::int64_t n, std::int64_t cols) {
  LOCKSTEP_GRID_LOOP(i, n) {
    const std::int64_t c = i % cols;
    const float v = (x[i] - mean[c]) * scale[c];
    y[i] = offset ? v + offset[c] : v;
  }
}
__global__ void batch_norm_backward_kernel(const float* dy, const float* x, const float* mean, const float* inv_std,
                                           const float* scale, const float* mean_dy, const float* mean_dy_xhat,
                                           float* dx, std::int64_t n, std::int64_t cols) {
  LOCKSTEP_GRID_LOOP(i, n) {
    const std::int64_t c = i % cols;
    const float xhat = (x[i] - mean[c]) * inv_std[c];
    dx[i] = scale[c] * (dy[i] - mean_dy[c] - xhat * mean_dy_xhat[c]);
  }
}

// ---- reduce_max ----
template <typename F>
__global__ void reduce_max_kernel(const F* x, F* out, std::int64_t* arg, std::int64_t outer, std::int64_t axis,
                                  std::int64_t inner) {
  const int lane = threadIdx.x % 32;
  LOCKSTEP_WARP_ROW_LOOP(r, outer * inner) {
    const std::int64_t o = r / inner, in = r - o * inner;
    const F* p = x + o * axis * inner + in;
    ArgBest b{Elem<F>::load(p[0]), 0};
    for (std::int64_t a = lane; a < axis; a += 32) b = arg_better(b, ArgBest{Elem<F>::load(p[a * inner]), a});
    b = warp_arg_best(b);
    if (lane == 0) {
      if (out) out[r] = Elem<F>::store(b.v);
      if (arg) arg[r] = b.i;
    }
  }
}

template <typename F>
__global__ void reduce_max_backward_kernel(const std::int64_t* arg, const F* g, F* dx, std::int64_t outer,
                                           std::int64_t axis, std::int64_t inner) {
  LOCKSTEP_GRID_LOOP(r, outer * inner) {
    const std::int64_t o = r / inner, i = r - o * inner;
    dx[(o * axis + arg[r]) * inner + i] = g[r];
  }
}

// ---- softmax ----
template <typename F>
__global__ void softmax_kernel(const F* x, F* y, std::int64_t rows, std::int64_t cols, bool log) {
  using E = Elem<F>;
  const int lane = threadIdx.x % 32;
  LOCKSTEP_WARP_ROW_LOOP(r, rows) {
    const F* xr = x + r * cols;
    F* yr = y + r * cols;
    float m = -INFINITY;
    for (std::int64_t c = lane; c < cols; c += 32) m = fmaxf(m, E::load(xr[c]));
    m = __shfl_sync(0xffffffffu, warp_max(m), 0);
    float s = 0.0f;
    for (std::int64_t c = lane; c < cols; c += 32) s += expf(E::load(xr[c]) - m);
    s = __shfl_sync(0xffffffffu, warp_sum(s), 0);
    if (log) {
      const float lse = m + logf(s);
      for (std::int64_t c = lane; c < cols; c += 32) yr[c] = E::store(E::load(xr[c]) - lse);
    } else {
      const float inv = 1.0f / s;
      for (std::int64_t c = lane; c < cols; c += 32) yr[c] = E::store(expf(E::load(xr[c]) - m) * inv);
    }
  }
}

template <typename F>
__global__ void softmax_backward_kernel(const F* y, const F* dy, F* dx, std::int64_t rows, std::int64_t cols,
                                        bool log) {
  using E = Elem<F>;
  const int lane = threadIdx.x % 32;
  LOCKSTEP_WARP_ROW_LOOP(r, rows) {
    const F* yr = y + r * cols;
    const F* gr = dy + r * cols;
    F* dr = dx + r * cols;
    float s = 0.0f;
    for (std::int64_t c = lane; c < cols; c += 32) s += log ? E::load(gr[c]) : E::load(gr[c]) * E::load(yr[c]);
    s = __shfl_sync(0xffffffffu, warp_sum(s), 0);
    for (std::int64_t c = lane; c < cols; c += 32) {
      dr[c] = log ? E::store(E::load(gr[c]) - expf(E::load(yr[c])) * s) : E::store(E::load(yr[c]) * (E::load(gr[c]) - s));
    }
  }
}

// ---- cross-entropy (float32) ----
// sparse_softmax_xent (y null) and softmax_sparse_xent (y as softmax_kernel writes it; probs may
// be null): the sum of the exponentials is softmax_kernel's, term for term.
__global__ void xent_kernel(const float* logits, const std::int64_t* labels, float* loss, float* probs, float* y,
                            std::int64_t rows, std::int64_t cols) {
  const int lane = threadIdx.x % 32;
  LOCKSTEP_WARP_ROW_LOOP(r, rows) {
    const float* xr = logits + r * cols;
    float* pr = probs ? probs + r * cols : nullptr;
    float* yr = y ? y + r * cols : nullptr;
    float m = -INFINITY;
    for (std::int64_t c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
    m = __shfl_sync(0xffffffffu, warp_max(m), 0);
    float s = 0.0f;
    for (std::int64_t c = lane; c < cols; c += 32) {
      const float e = expf(xr[c] - m);
      if (pr) pr[c] = e;
      s += e;
    }
    s = __shfl_sync(0xffffffffu, warp_sum(s), 0);
    const float inv = 1.0f / s;
    for (std::int64_t c = lane; c < cols; c += 32) {
      if (pr) pr[c] *= inv;
      if (yr) yr[c] = expf(xr[c] - m) * inv;
    }
    if (lane == 0) loss[r] = inside(labels[r], cols) ? -(xr[labels[r]] - m - logf(s)) : 0.0f;  // outside: raised later
  }
}

__global__ void xent_backward_kernel(const float* p, const std::int64_t* labels, const float* g, float* d,
                                     std::int64_t rows, std::int64_t cols) {
  LOCKSTEP_GRID_LOOP(i, rows * cols) {
    const std::int64_t r = i / cols, c = i - r * cols;
    const float v = inside(labels[r], cols) ? p[i] * g[r] : 0.0f;  // a row whose label is outside: none
    d[i] = c == labels[r] ? v - g[r] : v;
  }
}

__global__ void one_hot_kernel(const std::int64_t* labels, std::int64_t rows, std::int64_t classes, float* out) {
  LOCKSTEP_GRID_LOOP(i, rows * classes) {
    const std::int64_t r = i / classes;
    out[i] = i - r * classes == labels[r] ? 1.0f : 0.0f;
  }
}

// ---- dropout: the keying every backend shares (backend/dropout_rng.hpp) ----
// y = x * the mask as binary_kernel's kMul (the mask's value as stored), the mask kept unless null.
template <typename F>
__global__ void dropout_kernel(const F* x, F* y, F* mask, std::int64_t rows, std::int64_t cols,
                               std::uint32_t threshold, std::uint64_t seed, std::uint64_t stream_id,
                               std::uint64_t step, const std::int64_t* step_at, std::int64_t first_row, F keep,
                               F zero) {
  using E = Elem<F>;
  const std::uint64_t key = dropout::step_key(seed, stream_id, step, step_at);  // once per thread
  LOCKSTEP_GRID_LOOP(i, rows * cols) {
    const std::int64_t r = i / cols, c = i - r * cols;
    const F m = dropout::dropped(dropout::row_key(key, first_row + r), c, threshold) ? zero : keep;
    if (mask) mask[i] = m;
    y[i] = E::store(E::load(x[i]) * E::load(m));
  }
}

// random_fill: each unit's draw in float32 (dropout_rng.hpp), stored in the dtype.
template <typename F>
__global__ void random_fill_kernel(F* out, std::int64_t rows, std::int64_t cols, bool normal, std::uint64_t seed,
                                   std::uint64_t stream_id, std::uint64_t step, const std::int64_t* step_at,
                                   std::int64_t first_row) {
  using E = Elem<F>;
  const std::uint64_t key = dropout::step_key(seed, stream_id, step, step_at);  // once per thread
  LOCKSTEP_GRID_LOOP(i, rows * cols) {
    const std::int64_t r = i / cols, c = i - r * cols;
    const std::uint64_t row_key = dropout::row_key(key, first_row + r);
    out[i] = E::store(normal ? dropout::standard_normal(row_key, c) : dropout::uniform(row_key, c));
  }
}

template <typename F>
F host_store(float v) {
  if constexpr (std::is_same_v<F, Float16>) return to_float16(v);
  else if constexpr (std::is_same_v<F, BFloat16>) return to_bfloat16(v);
  else return v;
}
}  // namespace

template <typename F>
void reduce_sum(ComputeContext& ctx, const void* xv, void* outv, std::int64_t outer, std::int64_t axis,
                std::int64_t inner, float post_scale) {
  const F* x = static_cast<const F*>(xv);
  F* out = static_cast<F*>(outv);
  cudaStream_t s = stream(ctx);
  const std::int64_t cols = outer * inner;
  if (cols == 0) return;
  if (axis == 0) {  // 0 * post_scale, as on the CPU: the mean of nothing is NaN
    column_finish_kernel<F><<<blocks_for(cols), kThreads, 0, s>>>(nullptr, out, cols, 0, post_scale);
    check_launch("reduce_sum");
    return;
  }
  if (inner == 1) {
    if (outer < 64 && axis >= 8192) {
      long_row_sum_kernel<F><<<static_cast<unsigned>(outer), kThreads, 0, s>>>(x, out, axis, post_scale);
    } else {
      row_sum_kernel<F><<<row_blocks(outer), kThreads, 0, s>>>(x, out, outer, axis, post_scale);
    }
    check_launch("reduce_sum");
    return;
  }
  const std::int64_t segs = column_segments(cols, axis);
  const std::int64_t seg = (axis + segs - 1) / segs;
  Scratch part(ctx, static_cast<std::size_t>(cols * segs) * sizeof(float));
  column_partial_kernel<F><<<blocks_for(cols * segs), kThreads, 0, s>>>(x, part.as<float>(), outer, axis, inner, segs,
                                                                       seg);
  column_finish_kernel<F><<<blocks_for(cols), kThreads, 0, s>>>(part.as<float>(), out, cols, segs, post_scale);
  check_launch("reduce_sum");
}

template <typename F>
void relu_backward_bias_grad(ComputeContext& ctx, const void* y, const void* g, void* dx, void* db, std::int64_t rows,
                             std::int64_t cols) {
  if (rows == 0 || cols <= 1) {  // reduce_sum's other paths: the two kernels
    unary_backward<F>(ctx, UnaryOp::kRelu, y, y, g, dx, rows * cols, 0.0f, 0.0f);
    reduce_sum<F>(ctx, dx, db, 1, rows, cols, 1.0f);
    return;
  }
  cudaStream_t s = stream(ctx);
  const std::int64_t segs = column_segments(cols, rows);
  const std::int64_t seg = (rows + segs - 1) / segs;
  Scratch part(ctx, static_cast<std::size_t>(cols * segs) * sizeof(float));
  relu_backward_partial_kernel<F><<<blocks_for(cols * segs), kThreads, 0, s>>>(
      static_cast<const F*>(y), static_cast<const F*>(g), static_cast<F*>(dx), part.as<float>(), rows, cols, segs, seg);
  column_finish_kernel<F><<<blocks_for(cols), kThreads, 0, s>>>(part.as<float>(), static_cast<F*>(db), cols, segs, 1.0f);
  check_launch("relu_backward_bias_grad");
}

template <typename F>
void reduce_max(ComputeContext& ctx, const void* x, void* out, std::int64_t* arg, std::int64_t outer,
                std::int64_t axis, std::int64_t inner) {
  if (outer * inner == 0) return;
  reduce_max_kernel<F><<<row_blocks(outer * inner), kThreads, 0, stream(ctx)>>>(
      static_cast<const F*>(x), static_cast<F*>(out), arg, outer, axis, inner);
  check_launch("reduce_max");
}

template <typename F>
void reduce_max_backward(ComputeContext& ctx, const std::int64_t* arg, const void* g, void* dx, std::int64_t outer,
                         std::int64_t axis, std::int64_t inner) {
  const std::int64_t n = outer * axis * inner;
  if (n == 0) return;
  cudaStream_t s = stream(ctx);
  check(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(n) * sizeof(F), s), "cudaMemsetAsync");  // 0.0 in every float
  reduce_max_backward_kernel<F><<<blocks_for(outer * inner), kThreads, 0, s>>>(arg, static_cast<const F*>(g),
                                                                              static_cast<F*>(dx), outer, axis, inner);
  check_launch("reduce_max_backward");
}

template <typename F>
void softmax(ComputeContext& ctx, const void* x, void* y, std::int64_t rows, std::int64_t cols, bool log) {
  if (rows * cols == 0) return;
  softmax_kernel<F><<<row_blocks(rows), kThreads, 0, stream(ctx)>>>(static_cast<const F*>(x), static_cast<F*>(y), rows,
                                                                   cols, log);
  check_launch("softmax");
}

template <typename F>
void softmax_backward(ComputeContext& ctx, const void* y, const void* dy, void* dx, std::int64_t rows,
                      std::int64_t cols, bool log) {
  if (rows * cols == 0) return;
  softmax_backward_kernel<F><<<row_blocks(rows), kThreads, 0, stream(ctx)>>>(
      static_cast<const F*>(y), static_cast<const F*>(dy), static_cast<F*>(dx), rows, cols, log);
  check_launch("softmax_backward");
}

void sparse_softmax_xent(ComputeContext& ctx, const void* logits, const std::int64_t* labels, void* loss, void* probs,
                         std::int64_t rows, std::int64_t cols) {
  if (rows == 0) return;
  xent_kernel<<<row_blocks(rows), kThreads, 0, stream(ctx)>>>(static_cast<const float*>(logits), labels,
                                                             static_cast<float*>(loss), static_cast<float*>(probs),
                                                             nullptr, rows, cols);
  check_launch("sparse_softmax_xent");
}

void softmax_sparse_xent(ComputeContext& ctx, const void* logits, const std::int64_t* labels, void* loss, void* probs,
                         void* y, std::int64_t rows, std::int64_t cols) {
  if (rows == 0) return;
  xent_kernel<<<row_blocks(rows), kThreads, 0, stream(ctx)>>>(static_cast<const float*>(logits), labels,
                                                             static_cast<float*>(loss), static_cast<float*>(probs),
                                                             static_cast<float*>(y), rows, cols);
  check_launch("softmax_sparse_xent");
}

void sparse_softmax_xent_backward(ComputeContext& ctx, const void* probs, const std::int64_t* labels, const void* g,
                                  void* d, std::int64_t rows, std::int64_t cols) {
  if (rows * cols == 0) return;
  xent_backward_kernel<<<blocks_for(rows * cols), kThreads, 0, stream(ctx)>>>(
      static_cast<const float*>(probs), labels, static_cast<const float*>(g), static_cast<float*>(d), rows, cols);
  check_launch("sparse_softmax_xent_backward");
}

void one_hot(ComputeContext& ctx, const std::int64_t* labels, std::int64_t rows, std::int64_t classes, void* out) {
  if (rows * classes == 0) return;
  one_hot_kernel<<<blocks_for(rows * classes), kThreads, 0, stream(ctx)>>>(labels, rows, classes,
                                                                          static_cast<float*>(out));
  check_launch("one_hot");
}

template <typename F>
void dropout(ComputeContext& ctx, const void* x, void* y, void* mask, std::int64_t rows, std::int64_t cols, float rate,
             std::uint64_t seed, std::uint64_t stream_id, std::uint64_t step, const std::int64_t* step_at,
             std::int64_t first_row) {
  if (rows * cols == 0) return;
  dropout_kernel<F><<<blocks_for(rows * cols), kThreads, 0, stream(ctx)>>>(
      static_cast<const F*>(x), static_cast<F*>(y), static_cast<F*>(mask), rows, cols, dropout::threshold(rate), seed,
      stream_id, step, step_at, first_row, host_store<F>(1.0f / (1.0f - rate)), host_store<F>(0.0f));
  check_launch("dropout");
}

template <typename F>
void random_fill(ComputeContext& ctx, void* out, std::int64_t rows, std::int64_t cols, RandomDistribution distribution,
                 std::uint64_t seed, std::uint64_t stream_id, std::uint64_t step, const std::int64_t* step_at,
                 std::int64_t first_row) {
  if (rows * cols == 0) return;
  random_fill_kernel<F><<<blocks_for(rows * cols), kThreads, 0, stream(ctx)>>>(
      static_cast<F*>(out), rows, cols, distribution == RandomDistribution::kStandardNormal, seed, stream_id, step,
      step_at, first_row);
  check_launch("random_fill");
}

void batch_norm_reduce(ComputeContext& ctx, const void* x, const void* mean, const void* dy, const void* inv_std,
                       void* out, std::int64_t rows, std::int64_t cols) {
  if (cols == 0) return;
  const std::int64_t sums = dy ? 2 : 1;
  const std::int64_t segs = column_segments(cols, rows);
  const std::int64_t seg = (rows + segs - 1) / segs;
  cudaStream_t s = stream(ctx);
  Scratch part(ctx, static_cast<std::size_t>(cols * segs * sums) * sizeof(double));
  batch_norm_partial_kernel<<<blocks_for(cols * segs), kThreads, 0, s>>>(
      static_cast<const float*>(x), static_cast<const float*>(mean), static_cast<const float*>(dy),
      static_cast<const float*>(inv_std), part.as<double>(), rows, cols, segs, seg);
  batch_norm_finish_kernel<<<blocks_for(cols * sums), kThreads, 0, s>>>(part.as<double>(), static_cast<float*>(out),
                                                                          cols, segs, sums);
  check_launch("batch_norm_reduce");
}

void batch_norm_apply(ComputeContext& ctx, const void* x, const void* mean, const void* scale, const void* offset,
                      void* y, std::int64_t rows, std::int64_t cols) {
  if (rows * cols == 0) return;
  batch_norm_apply_kernel<<<blocks_for(rows * cols), kThreads, 0, stream(ctx)>>>(
      static_cast<const float*>(x), static_cast<const float*>(mean), static_cast<const float*>(scale),
      static_cast<const float*>(offset), static_cast<float*>(y), rows * cols, cols);
  check_launch("batch_norm_apply");
}

void batch_norm_backward(ComputeContext& ctx, const void* dy, const void* x, const void* mean, const void* inv_std,
                         const void* scale, const void* mean_dy, const void* mean_dy_xhat, void* dx, std::int64_t rows,
                         std::int64_t cols) {
  if (rows * cols == 0) return;
  batch_norm_backward_kernel<<<blocks_for(rows * cols), kThreads, 0, stream(ctx)>>>(
      static_cast<const float*>(dy), static_cast<const float*>(x), static_cast<const float*>(mean),
      static_cast<const float*>(inv_std), static_cast<const float*>(scale), static_cast<const float*>(mean_dy),
      static_cast<const float*>(mean_dy_xhat), static_cast<float*>(dx), rows * cols, cols);
  check_launch("batch_norm_backward");
}

// ---- LayerNormalization: a warp per row, its sums in the fixed warp tree ----
namespace {
__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                  float* inv_std, std::int64_t rows, std::int64_t cols, float epsilon) {
  const int lane = threadIdx.x % 32;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  LOCKSTEP_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * cols;
    float s = 0.0f;
    for (std::int64_t c = lane; c < cols; c += 32) s += xr[c];
    const float m = __shfl_sync(0xffffffffu, warp_sum(s), 0) * inv_cols;
    float q = 0.0f;
    for (std::int64_t c = lane; c < cols; c += 32) q += (xr[c] - m) * (xr[c] - m);
    const float is = rsqrtf(__shfl_sync(0xffffffffu, warp_sum(q), 0) * inv_cols + epsilon);
    for (std::int64_t c = lane; c < cols; c += 32) {
      float v = (xr[c] - m) * is;
      if (gamma) v *= gamma[c];
      if (beta) v += beta[c];
      y[r * cols + c] = v;
    }
    if (lane == 0) {
      mean[r] = m;
      inv_std[r] = is;
    }
  }
}

__global__ void layer_norm_backward_kernel(const float* x, const float* gamma, const float* dy, const float* mean,
                                           const float* inv_std, float* dx, std::int64_t rows, std::int64_t cols) {
  const int lane = threadIdx.x % 32;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  LOCKSTEP_WARP_ROW_LOOP(r, rows) {
    const float* xr = x + r * cols;
    const float* gr = dy + r * cols;
    const float m = mean[r], is = inv_std[r];
    float sh = 0.0f, shx = 0.0f;
    for (std::int64_t c = lane; c < cols; c += 32) {
      const float h = gamma ? gr[c] * gamma[c] : gr[c];
      sh += h;
      shx += h * (xr[c] - m) * is;
    }
    const float mh = __shfl_sync(0xffffffffu, warp_sum(sh), 0) * inv_cols;
    const float mhx = __shfl_sync(0xffffffffu, warp_sum(shx), 0) * inv_cols;
    for (std::int64_t c = lane; c < cols; c += 32) {
      const float h = gamma ? gr[c] * gamma[c] : gr[c];
      dx[r * cols + c] = (h - mh - (xr[c] - m) * is * mhx) * is;
    }
  }
}
}  // namespace

void layer_norm(ComputeContext& ctx, const void* x, const void* gamma, const void* beta, void* y, void* mean,
                void* inv_std, std::int64_t rows, std::int64_t cols, float epsilon) {
  if (rows * cols == 0) return;
  layer_norm_kernel<<<row_blocks(rows), kThreads, 0, stream(ctx)>>>(
      static_cast<const float*>(x), static_cast<const float*>(gamma), static_cast<const float*>(beta),
      static_cast<float*>(y), static_cast<float*>(mean), static_cast<float*>(inv_std), rows, cols, epsilon);
  check_launch("layer_norm");
}

void layer_norm_backward(ComputeContext& ctx, const void* x, const void* gamma, const void* dy, const void* mean,
                         const void* inv_std, void* dx, std::int64_t rows, std::int64_t cols) {
  if (rows * cols == 0) return;
  layer_norm_backward_kernel<<<row_blocks(rows), kThreads, 0, stream(ctx)>>>(
      static_cast<const float*>(x), static_cast<const float*>(gamma), static_cast<const float*>(dy),
      static_cast<const float*>(mean), static_cast<const float*>(inv_std), static_cast<float*>(dx), rows, cols);
  check_launch("layer_norm_backward");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, reduce_sum)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, reduce_max)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, reduce_max_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, softmax)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, softmax_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, dropout)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, random_fill)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, relu_backward_bias_grad)

}  // namespace lockstep::backend::cuda
