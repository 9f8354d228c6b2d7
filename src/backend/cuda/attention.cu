// Scaled dot-product attention on CUDA, straightforward rather than fast: one block per query
// row (forward and dq) or key row (dk, dv), its threads taking a tile of keys (queries) at a
// time with the CPU's online softmax; no [tq, tk] matrix is stored. Sums run in a fixed order
// (shared-memory trees, tiles in order): the same bits on every run, no atomics.
#include <cmath>
#include <limits>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/dropout_rng.hpp"

namespace lockstep::backend::cuda {

namespace {
constexpr int kTile = 128;  // threads per block, keys (queries) per tile
constexpr float kMaskedScore = -1e9f;

// The desc and what the host computed of dropout's keying (its step key each thread derives:
// the step may be a count in device memory, a.step_at).
struct Rules {
  AttentionDesc a;
  std::uint32_t threshold = 0;
  float keep_scale = 1;

  __device__ bool masked(const std::uint8_t* mask, std::int64_t e, std::int64_t i, std::int64_t j) const {
    return (a.causal && j > i) || (mask && mask[e * a.mask_b_stride + i * a.mask_q_stride + j] == 0);
  }
  /// Dropout's step key, read once per thread at the kernel's start (0 without dropout).
  __device__ std::uint64_t step_key() const {
    return a.dropout_rate > 0 ? dropout::step_key(a.seed, a.stream, a.step, a.step_at) : 0;
  }
  __device__ float keep(std::uint64_t key, std::int64_t e, std::int64_t head, std::int64_t i,
                        std::int64_t j) const {
    if (a.dropout_rate <= 0) return 1.0f;
    const std::uint64_t row = dropout::row_key(key, a.first_example + e);
    return dropout::dropped(row, (head * a.tq + i) * a.tk + j, threshold) ? 0.0f : keep_scale;
  }
  /// Where row i (of t rows of `width`) of (batch entry, head) bh starts (AttentionDesc::heads_last).
  __device__ std::int64_t row_at(std::int64_t bh, std::int64_t i, std::int64_t t, std::int64_t width) const {
    return a.heads_last ? ((bh / a.h * t + i) * a.h + bh % a.h) * width : (bh * t + i) * width;
  }
  /// Keys query row i can attend to (with a causal mask and no other: up to i).
  __device__ std::int64_t key_end(const std::uint8_t* mask, std::int64_t i) const {
    return a.causal && !mask ? (i + 1 < a.tk ? i + 1 : a.tk) : a.tk;
  }
};

Rules rules_of(const AttentionDesc& a) {
  Rules r{a};
  if (a.dropout_rate > 0) {
    r.threshold = dropout::threshold(a.dropout_rate);
    r.keep_scale = 1.0f / (1.0f - a.dropout_rate);
  }
  return r;
}

// Tree reduction over the block's kTile threads (sum or max), the result in every thread.
template <bool kMax>
__device__ float block_reduce(float* red, float v) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int w = kTile / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      red[threadIdx.x] =
          kMax ? fmaxf(red[threadIdx.x], red[threadIdx.x + w]) : red[threadIdx.x] + red[threadIdx.x + w];
    __syncthreads();
  }
  const float out = red[0];
  __syncthreads();
  return out;
}

template <typename F>
__device__ float dot(const float* x, const F* y, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t c = 0; c < n; ++c) s += x[c] * Elem<F>::load(y[c]);
  return s;
}
template <typename F>
__device__ float dot2(const F* x, const F* y, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t c = 0; c < n; ++c) s += Elem<F>::load(x[c]) * Elem<F>::load(y[c]);
  return s;
}

// exp(s - lse), or 1 / tk in a row with nothing to attend to (lse = +inf).
__device__ float probability(const AttentionDesc& a, float s, float lse) {
  return isinf(lse) && lse > 0 ? 1.0f / static_cast<float>(a.tk) : expf(s - lse);
}

// Block = query row (bh, i). Shared: qs[d], acc[dv], p[kTile], red[kTile].
template <typename F>
__global__ void forward_kernel(Rules R, const F* q, const F* k, const F* v, const std::uint8_t* mask, F* out,
                               float* lse) {
  extern __shared__ float sh[];
  const AttentionDesc& a = R.a;
  const std::int64_t row = blockIdx.x, bh = row / a.tq, i = row % a.tq, e = bh / a.h, head = bh % a.h;
  const std::uint64_t key = R.step_key();
  float* qs = sh;
  float* acc = qs + a.d;
  float* p = acc + a.dv;
  float* red = p + kTile;
  const F* qi = q + R.row_at(bh, i, a.tq, a.d);
  for (std::int64_t c = threadIdx.x; c < a.d; c += kTile) qs[c] = Elem<F>::load(qi[c]) * a.scale;
  for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile) acc[c] = 0.0f;
  __syncthreads();
  float m = -INFINITY, l = 0.0f;
  const std::int64_t key_end = R.key_end(mask, i);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    const std::int64_t j = j0 + threadIdx.x;
    const std::int64_t n = key_end - j0 < kTile ? key_end - j0 : kTile;
    float s = -INFINITY;
    if (j < key_end)
      s = R.masked(mask, e, i, j) ? kMaskedScore : dot(qs, k + R.row_at(bh, j, a.tk, a.d), a.d);
    const float m_new = fmaxf(m, block_reduce<true>(red, s));
    const float correction = expf(m - m_new);
    const float pj = j < key_end ? expf(s - m_new) : 0.0f;
    l = l * correction + block_reduce<false>(red, pj);
    p[threadIdx.x] = j < key_end ? pj * R.keep(key, e, head, i, j) : 0.0f;
    __syncthreads();
    for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile) {
      float x = acc[c] * correction;
      for (std::int64_t t = 0; t < n; ++t) x += p[t] * Elem<F>::load(v[R.row_at(bh, j0 + t, a.tk, a.dv) + c]);
      acc[c] = x;
    }
    m = m_new;
    __syncthreads();
  }
  const float inv = l > 0 ? 1.0f / l : 0.0f;
  F* out_i = out + R.row_at(bh, i, a.tq, a.dv);
  for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile) out_i[c] = Elem<F>::store(acc[c] * inv);
  // A row whose every score is masked: its probabilities are 1 / tk, marked by lse = +inf.
  if (threadIdx.x == 0) lse[row] = m <= kMaskedScore ? INFINITY : m + logf(l);
}

// Block = key row (bh, j): dk and dv over every query. Shared: dk[d], dv[dv], ds[kTile], pz[kTile].
template <typename F>
__global__ void key_grad_kernel(Rules R, const F* q, const F* k, const F* v, const std::uint8_t* mask,
                                const F* out, const F* dout, const float* lse, F* dk, F* dv) {
  extern __shared__ float sh[];
  const AttentionDesc& a = R.a;
  const std::int64_t key_row = blockIdx.x, bh = key_row / a.tk, j = key_row % a.tk, e = bh / a.h,
                     head = bh % a.h;
  const std::uint64_t key = R.step_key();
  float* dks = sh;
  float* dvs = dks + a.d;
  float* ds = dvs + a.dv;
  float* pz = ds + kTile;
  for (std::int64_t c = threadIdx.x; c < a.d; c += kTile) dks[c] = 0.0f;
  for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile) dvs[c] = 0.0f;
  const F* kj = k + R.row_at(bh, j, a.tk, a.d);
  const F* vj = v + R.row_at(bh, j, a.tk, a.dv);
  const std::int64_t first = a.causal && !mask ? j : 0;
  for (std::int64_t i0 = first; i0 < a.tq; i0 += kTile) {
    const std::int64_t i = i0 + threadIdx.x;
    const std::int64_t n = a.tq - i0 < kTile ? a.tq - i0 : kTile;
    float dsi = 0.0f, pzi = 0.0f;
    if (i < a.tq) {
      const std::int64_t row = bh * a.tq + i, qi = R.row_at(bh, i, a.tq, a.d),
                         oi = R.row_at(bh, i, a.tq, a.dv);
      const bool masked = R.masked(mask, e, i, j);
      const float s = masked ? kMaskedScore : a.scale * dot2(q + qi, kj, a.d);
      const float p = probability(a, s, lse[row]);
      const float z = R.keep(key, e, head, i, j);
      const float dp = dot2(dout + oi, vj, a.dv);
      const float delta = dot2(dout + oi, out + oi, a.dv);
      pzi = p * z;
      dsi = masked ? 0.0f : p * (dp * z - delta);
    }
    ds[threadIdx.x] = dsi;
    pz[threadIdx.x] = pzi;
    __syncthreads();
    for (std::int64_t c = threadIdx.x; c < a.d; c += kTile) {
      float x = dks[c];
      for (std::int64_t t = 0; t < n; ++t)
        x += ds[t] * a.scale * Elem<F>::load(q[R.row_at(bh, i0 + t, a.tq, a.d) + c]);
      dks[c] = x;
    }
    for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile) {
      float x = dvs[c];
      for (std::int64_t t = 0; t < n; ++t)
        x += pz[t] * Elem<F>::load(dout[R.row_at(bh, i0 + t, a.tq, a.dv) + c]);
      dvs[c] = x;
    }
    __syncthreads();
  }
  for (std::int64_t c = threadIdx.x; c < a.d; c += kTile)
    dk[R.row_at(bh, j, a.tk, a.d) + c] = Elem<F>::store(dks[c]);
  for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile)
    dv[R.row_at(bh, j, a.tk, a.dv) + c] = Elem<F>::store(dvs[c]);
}

// Block = query row (bh, i): dq over every key. Shared: qs[d], dq[d], ds[kTile], red[kTile].
template <typename F>
__global__ void query_grad_kernel(Rules R, const F* q, const F* k, const F* v, const std::uint8_t* mask,
                                  const F* out, const F* dout, const float* lse, F* dq) {
  extern __shared__ float sh[];
  const AttentionDesc& a = R.a;
  const std::int64_t row = blockIdx.x, bh = row / a.tq, i = row % a.tq, e = bh / a.h, head = bh % a.h;
  const std::uint64_t key = R.step_key();
  float* qs = sh;
  float* dqs = qs + a.d;
  float* ds = dqs + a.d;
  float* red = ds + kTile;
  const std::int64_t qi = R.row_at(bh, i, a.tq, a.d), oi = R.row_at(bh, i, a.tq, a.dv);
  for (std::int64_t c = threadIdx.x; c < a.d; c += kTile) {
    qs[c] = Elem<F>::load(q[qi + c]) * a.scale;
    dqs[c] = 0.0f;
  }
  float part = 0.0f;
  for (std::int64_t c = threadIdx.x; c < a.dv; c += kTile)
    part += Elem<F>::load(dout[oi + c]) * Elem<F>::load(out[oi + c]);
  const float delta = block_reduce<false>(red, part);  // also the barrier after qs
  const std::int64_t key_end = R.key_end(mask, i);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    const std::int64_t j = j0 + threadIdx.x;
    const std::int64_t n = key_end - j0 < kTile ? key_end - j0 : kTile;
    float dsj = 0.0f;
    if (j < key_end && !R.masked(mask, e, i, j)) {
      const float p = probability(a, dot(qs, k + R.row_at(bh, j, a.tk, a.d), a.d), lse[row]);
      const float dp = dot2(dout + oi, v + R.row_at(bh, j, a.tk, a.dv), a.dv);
      dsj = p * (dp * R.keep(key, e, head, i, j) - delta);
    }
    ds[threadIdx.x] = dsj;
    __syncthreads();
    for (std::int64_t c = threadIdx.x; c < a.d; c += kTile) {
      float x = dqs[c];
      for (std::int64_t t = 0; t < n; ++t)
        x += ds[t] * a.scale * Elem<F>::load(k[R.row_at(bh, j0 + t, a.tk, a.d) + c]);
      dqs[c] = x;
    }
    __syncthreads();
  }
  for (std::int64_t c = threadIdx.x; c < a.d; c += kTile) dq[qi + c] = Elem<F>::store(dqs[c]);
}

std::size_t shared_bytes(std::int64_t floats) {
  return static_cast<std::size_t>(floats + 2 * kTile) * sizeof(float);
}

// What a launch of `blocks` blocks with `bytes` of dynamic shared memory needs first: a grid's x
// dimension holds at most 2^31 - 1 blocks, and a block gets more than 48 KB of dynamic shared
// memory only where its kernel opted in (cudaFuncAttributeMaxDynamicSharedMemorySize), up to the
// device's cudaDevAttrMaxSharedMemoryPerBlockOptin (CUDA C++ Programming Guide, shared memory of
// compute capability 7.x+). A head too wide for that is a ValueError naming it, not a failed launch.
template <typename Kernel>
unsigned prepare_launch(ComputeContext& ctx, Kernel kernel, std::int64_t blocks, std::size_t bytes,
                        const AttentionDesc& a, const char* rows) {
  const std::string what = "scaled_dot_product_attention on " + ctx.device().str() + ": ";
  if (blocks > std::numeric_limits<int>::max())
    throw ValueError(what + std::to_string(blocks) + " " + rows + " (b * h * t), more than the " +
                     std::to_string(std::numeric_limits<int>::max()) + " blocks of a CUDA grid; use smaller batches");
  constexpr std::size_t kDefault = std::size_t{48} << 10;
  if (bytes > kDefault) {
    int optin = 0;
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, lane(ctx).device->index),
          "cudaDeviceGetAttribute (shared memory per block)");
    if (bytes > static_cast<std::size_t>(optin))
      throw ValueError(what + "heads of key size " + std::to_string(a.d) + " and value size " + std::to_string(a.dv) +
                       " need " + std::to_string(bytes) + " bytes of shared memory per block, more than the " +
                       std::to_string(optin) + " this GPU gives one; use smaller heads (more of them)");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
          "cudaFuncSetAttribute (attention's shared memory)");
  }
  return static_cast<unsigned>(blocks);
}
}  // namespace

template <typename F>
void attention(ComputeContext& ctx, const AttentionDesc& a, const void* q, const void* k, const void* v,
               const std::uint8_t* mask, void* out, float* lse) {
  const std::int64_t rows = a.b * a.h * a.tq;
  if (rows == 0) return;
  const std::size_t bytes = shared_bytes(a.d + a.dv);
  const unsigned grid = prepare_launch(ctx, forward_kernel<F>, rows, bytes, a, "query rows");
  forward_kernel<F><<<grid, kTile, bytes, stream(ctx)>>>(
      rules_of(a), static_cast<const F*>(q), static_cast<const F*>(k), static_cast<const F*>(v), mask,
      static_cast<F*>(out), lse);
  check_launch("attention");
}

template <typename F>
void attention_backward(ComputeContext& ctx, const AttentionDesc& a, const void* q, const void* k,
                        const void* v, const std::uint8_t* mask, const void* out, const void* dout,
                        const float* lse, void* dq, void* dk, void* dv) {
  const Rules r = rules_of(a);
  const F *qf = static_cast<const F*>(q), *kf = static_cast<const F*>(k), *vf = static_cast<const F*>(v);
  const F *of = static_cast<const F*>(out), *gf = static_cast<const F*>(dout);
  const std::int64_t keys = a.b * a.h * a.tk, rows = a.b * a.h * a.tq;
  const std::size_t key_bytes = shared_bytes(a.d + a.dv), query_bytes = shared_bytes(2 * a.d);
  // Both checked before either runs: a refused launch leaves no gradient half written.
  const unsigned key_grid = keys > 0 ? prepare_launch(ctx, key_grad_kernel<F>, keys, key_bytes, a, "key rows") : 0;
  const unsigned query_grid = rows > 0 ? prepare_launch(ctx, query_grad_kernel<F>, rows, query_bytes, a, "query rows") : 0;
  if (key_grid > 0)
    key_grad_kernel<F><<<key_grid, kTile, key_bytes, stream(ctx)>>>(r, qf, kf, vf, mask, of, gf, lse,
                                                                   static_cast<F*>(dk), static_cast<F*>(dv));
  if (query_grid > 0)
    query_grad_kernel<F><<<query_grid, kTile, query_bytes, stream(ctx)>>>(r, qf, kf, vf, mask, of, gf, lse,
                                                                         static_cast<F*>(dq));
  check_launch("attention_backward");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, attention)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, attention_backward)

}  // namespace lockstep::backend::cuda
