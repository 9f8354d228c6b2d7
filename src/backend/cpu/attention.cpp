// Scaled dot-product attention, flash-attention style: each task takes one (batch, head) and a
// block of queries (or, for dk and dv, a block of keys) and walks the other side block by block
// with an online softmax (a running maximum and sum per query row), so no [tq, tk] matrix is
// ever held: a task's memory is a few blocks of rows in float32. Every output element is
// computed inside one task in a fixed order: the same bits whatever the pool.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/dropout_rng.hpp"

namespace lockstep::backend::cpu {

namespace {
constexpr std::int64_t kQueryBlock = 32;
constexpr std::int64_t kKeyBlock = 64;
constexpr float kMaskedScore = -1e9f;  // Keras' large negative for float32

// The rules of one (batch entry, head): which scores are masked and what dropout keeps.
struct Head {
  const AttentionDesc& a;
  std::int64_t head;
  const std::uint8_t* mask;  // this batch entry's mask, or null
  std::uint64_t row_key = 0;
  std::uint32_t threshold = 0;
  float keep_scale = 1;

  Head(const AttentionDesc& desc, std::int64_t bh, const std::uint8_t* mask_all)
      : a(desc), head(bh % desc.h), mask(mask_all ? mask_all + (bh / desc.h) * desc.mask_b_stride : nullptr) {
    if (a.dropout_rate > 0) {
      row_key = dropout::row_key(dropout::step_key(a.seed, a.stream, a.step), a.first_example + bh / a.h);
      threshold = dropout::threshold(a.dropout_rate);
      keep_scale = 1.0f / (1.0f - a.dropout_rate);
    }
  }
  bool masked(std::int64_t i, std::int64_t j) const {
    return (a.causal && j > i) || (mask && mask[i * a.mask_q_stride + j] == 0);
  }
  /// What dropout multiplies probability (i, j) by.
  float keep(std::int64_t i, std::int64_t j) const {
    if (a.dropout_rate <= 0) return 1.0f;
    return dropout::dropped(row_key, (head * a.tq + i) * a.tk + j, threshold) ? 0.0f : keep_scale;
  }
  /// The keys query rows [.., last] can attend to: with a causal mask and no other, the keys
  /// past `last` (masked for every row) are skipped; their probabilities are exactly 0.
  std::int64_t key_end(std::int64_t last) const {
    return a.causal && !mask ? std::min(a.tk, last + 1) : a.tk;
  }
};

// exp(x), without libm's slow underflow path for the masked scores' -1e9 (below -104 float32's
// exp is 0 anyway).
inline float exp_or_zero(float x) { return x < -110.0f ? 0.0f : std::exp(x); }

// Rows [0, n) of a [*, cols] matrix into float32 dst [n, cols], times `scale`.
template <typename F>
void load_rows(const F* src, std::int64_t n, std::int64_t cols, float scale, float* dst) {
  for (std::int64_t i = 0; i < n * cols; ++i) dst[i] = Elem<F>::load(src[i]) * scale;
}
// Rows [0, n) of a [*, cols] matrix into float32 dst [cols, kKeyBlock] (transposed; columns
// past n zero), so that a query's scores against the block are one vector loop per channel.
template <typename F>
void load_transposed(const F* src, std::int64_t n, std::int64_t cols, float* dst) {
  for (std::int64_t c = 0; c < cols; ++c) {
    float* row = dst + c * kKeyBlock;
    for (std::int64_t j = 0; j < n; ++j) row[j] = Elem<F>::load(src[j * cols + c]);
    for (std::int64_t j = n; j < kKeyBlock; ++j) row[j] = 0.0f;
  }
}
// s[j] = x . t[:, j] for j < kKeyBlock, t [cols, kKeyBlock].
void dot_block(const float* x, const float* t, std::int64_t cols, float* s) {
  for (std::int64_t j = 0; j < kKeyBlock; ++j) s[j] = 0.0f;
  for (std::int64_t c = 0; c < cols; ++c) {
    const float xc = x[c];
    const float* tc = t + c * kKeyBlock;
    for (std::int64_t j = 0; j < kKeyBlock; ++j) s[j] += xc * tc[j];
  }
}
// Query i's scores against keys [j0, j0 + n) (kt: that block, transposed), masked ones replaced.
void scores(const Head& hd, const float* q_scaled, const float* kt, std::int64_t i, std::int64_t j0,
            std::int64_t n, float* s) {
  dot_block(q_scaled, kt, hd.a.d, s);
  for (std::int64_t j = 0; j < n; ++j)
    if (hd.masked(i, j0 + j)) s[j] = kMaskedScore;
}

template <typename F>
void forward_task(const Head& hd, std::int64_t q0, std::int64_t nq, const F* q, const F* k, const F* v,
                  F* out, float* lse, std::vector<float>& buf) {
  const AttentionDesc& a = hd.a;
  const std::int64_t d = a.d, dv = a.dv;
  buf.assign(
      static_cast<std::size_t>(d * kKeyBlock + kKeyBlock * dv + kQueryBlock * (d + dv + 2) + kKeyBlock),
      0.0f);
  float* kt = buf.data();
  float* vb = kt + d * kKeyBlock;
  float* qs = vb + kKeyBlock * dv;
  float* acc = qs + kQueryBlock * d;
  float* m = acc + kQueryBlock * dv;
  float* l = m + kQueryBlock;
  float* s = l + kQueryBlock;
  load_rows(q + q0 * d, nq, d, a.scale, qs);
  for (std::int64_t r = 0; r < nq; ++r) m[r] = -std::numeric_limits<float>::infinity();
  const std::int64_t key_end = hd.key_end(q0 + nq - 1);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
    const std::int64_t n = std::min(kKeyBlock, key_end - j0);
    load_transposed(k + j0 * d, n, d, kt);
    load_rows(v + j0 * dv, n, dv, 1.0f, vb);
    for (std::int64_t r = 0; r < nq; ++r) {
      const std::int64_t i = q0 + r;
      scores(hd, qs + r * d, kt, i, j0, n, s);
      float block_max = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < n; ++j) block_max = std::max(block_max, s[j]);
      const float m_new = std::max(m[r], block_max);
      const float correction = exp_or_zero(m[r] - m_new);
      float* acc_r = acc + r * dv;
      l[r] *= correction;
      for (std::int64_t c = 0; c < dv; ++c) acc_r[c] *= correction;
      for (std::int64_t j = 0; j < n; ++j) {
        const float p = exp_or_zero(s[j] - m_new);
        l[r] += p;
        const float pz = p * hd.keep(i, j0 + j);
        if (pz == 0.0f) continue;
        const float* vj = vb + j * dv;
        for (std::int64_t c = 0; c < dv; ++c) acc_r[c] += pz * vj[c];
      }
      m[r] = m_new;
    }
  }
  for (std::int64_t r = 0; r < nq; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;  // no keys at all: zeros
    for (std::int64_t c = 0; c < dv; ++c) out[(q0 + r) * dv + c] = Elem<F>::store(acc[r * dv + c] * inv);
    // A row whose every score is masked: its probabilities are 1 / tk, marked by lse = +inf.
    lse[q0 + r] = m[r] <= kMaskedScore ? std::numeric_limits<float>::infinity() : m[r] + std::log(l[r]);
  }
}

// What both backward passes know of one (batch, head): the gradient of a score from its query
// row's recomputed probabilities.
struct BackwardRow {
  const float* q_scaled;  // [d]
  const float* dout;      // [dv]
  float lse, delta;       // the row's log-sum-exp and dout . out
};
// ds[j] (the scores' gradient, 0 where masked) and pz[j] (dropout-kept probability) of query i
// against keys [j0, j0 + n); kt, vt: the block's keys and values transposed.
void score_grads(const Head& hd, const BackwardRow& row, const float* kt, const float* vt, std::int64_t i,
                 std::int64_t j0, std::int64_t n, float* s, float* dp, float* ds, float* pz) {
  scores(hd, row.q_scaled, kt, i, j0, n, s);
  dot_block(row.dout, vt, hd.a.dv, dp);
  for (std::int64_t j = 0; j < n; ++j) {
    const float p = row.lse == std::numeric_limits<float>::infinity() ? 1.0f / static_cast<float>(hd.a.tk)
                                                                      : exp_or_zero(s[j] - row.lse);
    const float z = hd.keep(i, j0 + j);
    pz[j] = p * z;
    ds[j] = hd.masked(i, j0 + j) ? 0.0f : p * (dp[j] * z - row.delta);
  }
}

template <typename F>
struct BackwardArgs {
  const F *q, *k, *v, *dout;
  const float *lse, *delta;
  F *dq, *dk, *dv;
};

// dk and dv of keys [j0, j0 + n) of one (batch, head), over every query row.
template <typename F>
void key_block_task(const Head& hd, std::int64_t bh, std::int64_t j0, std::int64_t n,
                    const BackwardArgs<F>& g, std::vector<float>& buf) {
  const AttentionDesc& a = hd.a;
  const std::int64_t d = a.d, dv = a.dv;
  buf.assign(static_cast<std::size_t>((d + dv) * (kKeyBlock * 2 + kQueryBlock) + 2 * kKeyBlock +
                                      2 * kQueryBlock * kKeyBlock),
             0.0f);
  float* kt = buf.data();
  float* vt = kt + d * kKeyBlock;
  float* dk = vt + dv * kKeyBlock;
  float* dvv = dk + kKeyBlock * d;
  float* qs = dvv + kKeyBlock * dv;  // a block of query rows, and their dout rows
  float* dor = qs + kQueryBlock * d;
  float* s = dor + kQueryBlock * dv;
  float* dp = s + kKeyBlock;
  float* ds = dp + kKeyBlock;  // [kQueryBlock, kKeyBlock], and pz
  float* pz = ds + kQueryBlock * kKeyBlock;
  const F* k = g.k + bh * a.tk * d;
  const F* v = g.v + bh * a.tk * dv;
  load_transposed(k + j0 * d, n, d, kt);
  load_transposed(v + j0 * dv, n, dv, vt);
  // With only a causal mask, rows before j0 give these keys nothing.
  const std::int64_t first = a.causal && !hd.mask ? j0 : 0;
  for (std::int64_t i0 = first; i0 < a.tq; i0 += kQueryBlock) {
    const std::int64_t nr = std::min(kQueryBlock, a.tq - i0), row0 = bh * a.tq + i0;
    load_rows(g.q + row0 * d, nr, d, a.scale, qs);
    load_rows(g.dout + row0 * dv, nr, dv, 1.0f, dor);
    for (std::int64_t r = 0; r < nr; ++r)
      score_grads(hd, {qs + r * d, dor + r * dv, g.lse[row0 + r], g.delta[row0 + r]}, kt, vt, i0 + r, j0, n,
                  s, dp, ds + r * kKeyBlock, pz + r * kKeyBlock);
    // Key by key, the block's rows in order (each sum still runs over the rows in order): a
    // key's accumulators stay in the first-level cache.
    for (std::int64_t j = 0; j < n; ++j) {
      float* dvj = dvv + j * dv;
      float* dkj = dk + j * d;
      for (std::int64_t r = 0; r < nr; ++r) {
        const float w = pz[r * kKeyBlock + j], x = ds[r * kKeyBlock + j];
        const float* dr = dor + r * dv;
        const float* qr = qs + r * d;
        if (w != 0.0f)
          for (std::int64_t c = 0; c < dv; ++c) dvj[c] += w * dr[c];
        if (x != 0.0f)
          for (std::int64_t c = 0; c < d; ++c) dkj[c] += x * qr[c];
      }
    }
  }
  F* dk_out = g.dk + (bh * a.tk + j0) * d;
  F* dv_out = g.dv + (bh * a.tk + j0) * dv;
  for (std::int64_t x = 0; x < n * d; ++x) dk_out[x] = Elem<F>::store(dk[x]);
  for (std::int64_t x = 0; x < n * dv; ++x) dv_out[x] = Elem<F>::store(dvv[x]);
}

// dq of query rows [q0, q0 + nq) of one (batch, head), over every key.
template <typename F>
void query_block_task(const Head& hd, std::int64_t bh, std::int64_t q0, std::int64_t nq,
                      const BackwardArgs<F>& g, std::vector<float>& buf) {
  const AttentionDesc& a = hd.a;
  const std::int64_t d = a.d, dv = a.dv;
  buf.assign(static_cast<std::size_t>(d * kKeyBlock * 2 + dv * kKeyBlock + kQueryBlock * (2 * d + dv) +
                                      4 * kKeyBlock),
             0.0f);
  float* kt = buf.data();
  float* kb = kt + d * kKeyBlock;
  float* vt = kb + kKeyBlock * d;
  float* qs = vt + dv * kKeyBlock;
  float* dor = qs + kQueryBlock * d;
  float* dq = dor + kQueryBlock * dv;
  float* s = dq + kQueryBlock * d;
  float *dp = s + kKeyBlock, *ds = dp + kKeyBlock, *pz = ds + kKeyBlock;
  const std::int64_t row0 = bh * a.tq + q0;
  load_rows(g.q + row0 * d, nq, d, a.scale, qs);
  load_rows(g.dout + row0 * dv, nq, dv, 1.0f, dor);
  const F* k = g.k + bh * a.tk * d;
  const F* v = g.v + bh * a.tk * dv;
  const std::int64_t key_end = hd.key_end(q0 + nq - 1);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
    const std::int64_t n = std::min(kKeyBlock, key_end - j0);
    load_transposed(k + j0 * d, n, d, kt);
    load_rows(k + j0 * d, n, d, a.scale, kb);
    load_transposed(v + j0 * dv, n, dv, vt);
    for (std::int64_t r = 0; r < nq; ++r) {
      const BackwardRow row{qs + r * d, dor + r * dv, g.lse[row0 + r], g.delta[row0 + r]};
      score_grads(hd, row, kt, vt, q0 + r, j0, n, s, dp, ds, pz);
      float* dq_r = dq + r * d;
      for (std::int64_t j = 0; j < n; ++j)
        if (ds[j] != 0.0f)
          for (std::int64_t c = 0; c < d; ++c) dq_r[c] += ds[j] * kb[j * d + c];
    }
  }
  F* dq_out = g.dq + row0 * d;
  for (std::int64_t x = 0; x < nq * d; ++x) dq_out[x] = Elem<F>::store(dq[x]);
}

std::int64_t blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }
}  // namespace

template <typename F>
void attention(ComputeContext& ctx, const AttentionDesc& a, const void* qv, const void* kv, const void* vv,
               const std::uint8_t* mask, void* outv, float* lse) {
  const F* q = static_cast<const F*>(qv);
  const F* k = static_cast<const F*>(kv);
  const F* v = static_cast<const F*>(vv);
  F* out = static_cast<F*>(outv);
  const std::int64_t qb = blocks(a.tq, kQueryBlock);
  parallel_rows(ctx, a.b * a.h * qb, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buf;
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bh = t / qb, q0 = (t % qb) * kQueryBlock;
      forward_task(Head(a, bh, mask), q0, std::min(kQueryBlock, a.tq - q0), q + bh * a.tq * a.d,
                   k + bh * a.tk * a.d, v + bh * a.tk * a.dv, out + bh * a.tq * a.dv, lse + bh * a.tq, buf);
    }
  });
}

template <typename F>
void attention_backward(ComputeContext& ctx, const AttentionDesc& a, const void* q, const void* k,
                        const void* v, const std::uint8_t* mask, const void* outv, const void* dout,
                        const float* lse, void* dq, void* dk, void* dv) {
  // delta[row] = dout . out: the softmax gradient's row term (dropout included, since out is
  // the dropped-out probabilities times v).
  const std::int64_t rows = a.b * a.h * a.tq;
  std::vector<float> delta(static_cast<std::size_t>(rows));
  const F* out = static_cast<const F*>(outv);
  const F* dy = static_cast<const F*>(dout);
  parallel_rows(ctx, rows, a.dv, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      float s = 0.0f;
      for (std::int64_t c = 0; c < a.dv; ++c)
        s += Elem<F>::load(dy[r * a.dv + c]) * Elem<F>::load(out[r * a.dv + c]);
      delta[static_cast<std::size_t>(r)] = s;
    }
  });
  const BackwardArgs<F> g{
      static_cast<const F*>(q), static_cast<const F*>(k), static_cast<const F*>(v), dy, lse, delta.data(),
      static_cast<F*>(dq),      static_cast<F*>(dk),      static_cast<F*>(dv)};
  const std::int64_t kb = blocks(a.tk, kKeyBlock), qb = blocks(a.tq, kQueryBlock);
  parallel_rows(ctx, a.b * a.h * kb, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buf;
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bh = t / kb, j0 = (t % kb) * kKeyBlock;
      key_block_task(Head(a, bh, mask), bh, j0, std::min(kKeyBlock, a.tk - j0), g, buf);
    }
  });
  parallel_rows(ctx, a.b * a.h * qb, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buf;
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bh = t / qb, q0 = (t % qb) * kQueryBlock;
      query_block_task(Head(a, bh, mask), bh, q0, std::min(kQueryBlock, a.tq - q0), g, buf);
    }
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, attention)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, attention_backward)

}  // namespace lockstep::backend::cpu
