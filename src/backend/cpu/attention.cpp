// Scaled dot-product attention, flash-attention style: the queries and keys of one (batch, head)
// go in blocks of kBlock rows; a block pair's scores, probabilities and products are small
// float32 matrices in the first-level cache, multiplied by the register-blocked tiles of
// attention_tiles.hpp. The forward pass walks the key blocks with an online softmax (a running
// maximum and sum per query row); the backward pass recomputes the probabilities from the rows'
// log-sum-exps. No [tq, tk] matrix is ever held: memory is linear in the sequence length.
// Every output element is summed in one fixed order (keys, or query rows, ascending): the same
// bits whatever the pool and whichever backward schedule the thread count picks.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/attention_tiles.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/dropout_rng.hpp"

namespace lockstep::backend::cpu {

namespace {
using tiles::kLanes;
using tiles::padded;
using tiles::Vec;
constexpr std::int64_t kBlock = 64;    // query or key rows of a block; a multiple of kLanes
constexpr float kMaskedScore = -1e9f;  // Keras' large negative for float32
constexpr float kInf = std::numeric_limits<float>::infinity();

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
      row_key =
          dropout::row_key(dropout::step_key(a.seed, a.stream, a.step, a.step_at), a.first_example + bh / a.h);
      threshold = dropout::threshold(a.dropout_rate);
      keep_scale = 1.0f / (1.0f - a.dropout_rate);
    }
  }
  bool masked(std::int64_t i, std::int64_t j) const {
    return (a.causal && j > i) || (mask && mask[i * a.mask_q_stride + j] == 0);
  }
  /// Whether a score of query rows [i0, ..) against keys [j0, j0 + n) may be masked.
  bool any_masked(std::int64_t i0, std::int64_t j0, std::int64_t n) const {
    return mask || (a.causal && j0 + n - 1 > i0);
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
  /// The first query row that attends to key j0 or later.
  std::int64_t first_row(std::int64_t j0) const { return a.causal && !mask ? j0 : 0; }
};

// A task's float32 scratch: blocks of [kBlock, max(d, dv, kBlock) padded] floats, each a few
// cache lines past the last so that the blocks do not share cache sets.
class Scratch {
 public:
  Scratch(std::vector<float>& buf, const AttentionDesc& a, int blocks)
      : size_(kBlock * std::max({padded(a.d), padded(a.dv), kBlock}) + 2 * kLanes) {
    if (buf.size() < static_cast<std::size_t>(blocks * size_))
      buf.resize(static_cast<std::size_t>(blocks * size_));
    next_ = buf.data();
  }
  float* take() {
    float* p = next_;
    next_ += size_;
    return p;
  }

 private:
  std::int64_t size_;
  float* next_;
};

// Where row i (of t rows of `width`) of (batch entry, head) bh starts in q, k, v, out or a
// gradient, and how far apart that head's rows are (AttentionDesc::heads_last).
std::int64_t row_at(const AttentionDesc& a, std::int64_t bh, std::int64_t i, std::int64_t t,
                    std::int64_t width) {
  return a.heads_last ? ((bh / a.h * t + i) * a.h + bh % a.h) * width : (bh * t + i) * width;
}
std::int64_t row_step(const AttentionDesc& a, std::int64_t width) {
  return a.heads_last ? a.h * width : width;
}

// Rows [0, n) of cols elements, rows src_ld apart, into float32 dst (leading dimension ld), times
// `scale`.
template <typename F>
void load_rows(const F* src, std::int64_t src_ld, std::int64_t n, std::int64_t cols, float scale, float* dst,
               std::int64_t ld) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[r * ld + c] = Elem<F>::load(src[r * src_ld + c]) * scale;
}
// The same, transposed: dst [cols, kBlock].
template <typename F>
void load_transposed(const F* src, std::int64_t src_ld, std::int64_t n, std::int64_t cols, float scale,
                     float* dst) {
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * kBlock + j] = Elem<F>::load(src[j * src_ld + c]) * scale;
}
template <typename F>
void store_rows(const float* src, std::int64_t ld, std::int64_t n, std::int64_t cols, F* dst,
                std::int64_t dst_ld) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[r * dst_ld + c] = Elem<F>::store(src[r * ld + c]);
}

// A block of scores, query rows [i0, i0 + nr) against keys [j0, j0 + n): element (r, j) at
// s[r * kBlock + j], or at s[j * kBlock + r] when transposed.
struct ScoreBlock {
  std::int64_t i0, nr, j0, n;
  bool transposed;
  std::int64_t at(std::int64_t r, std::int64_t j) const {
    return transposed ? j * kBlock + r : r * kBlock + j;
  }
};

void mask_scores(const Head& hd, const ScoreBlock& b, float* s) {
  if (!hd.any_masked(b.i0, b.j0, b.n)) return;
  for (std::int64_t r = 0; r < b.nr; ++r)
    for (std::int64_t j = 0; j < b.n; ++j)
      if (hd.masked(b.i0 + r, b.j0 + j)) s[b.at(r, j)] = kMaskedScore;
}

// In place: s (scores) becomes the dropout-kept probabilities, exp(s - lse) * keep, and dp
// (dout . v) the scores' gradient, p (dp keep - delta); lse and delta are the block's rows'
// (padded with zeros). A row with nothing to attend to (lse +inf) has probabilities 1 / tk and
// no score gradient (its scores are all the mask's constant).
void probabilities_and_grads(const Head& hd, const ScoreBlock& b, const float* lse, const float* delta,
                             float* s, float* dp) {
  const bool dropout = hd.a.dropout_rate > 0;
  const auto step = [&](float* sv, float* dpv, Vec l, Vec dl) {
    const Vec p = tiles::exp(tiles::load(sv) - l);
    tiles::store(sv, p);
    if (!dropout) tiles::store(dpv, p * (tiles::load(dpv) - dl));
  };
  if (b.transposed) {
    for (std::int64_t j = 0; j < b.n; ++j)
      for (std::int64_t r = 0; r < b.nr; r += kLanes)
        step(s + j * kBlock + r, dp + j * kBlock + r, tiles::load(lse + r), tiles::load(delta + r));
  } else {
    for (std::int64_t r = 0; r < b.nr; ++r)
      for (std::int64_t j = 0; j < b.n; j += kLanes)
        step(s + r * kBlock + j, dp + r * kBlock + j, tiles::splat(lse[r]), tiles::splat(delta[r]));
  }
  for (std::int64_t r = 0; r < b.nr; ++r) {
    const bool nothing = lse[r] == kInf;
    if (!nothing && !dropout) continue;
    for (std::int64_t j = 0; j < b.n; ++j) {
      const std::int64_t at = b.at(r, j);
      const float p = nothing ? 1.0f / static_cast<float>(hd.a.tk) : s[at], z = hd.keep(b.i0 + r, b.j0 + j);
      if (nothing)
        dp[at] = 0.0f;
      else
        dp[at] = p * (dp[at] * z - delta[r]);
      s[at] = p * z;
    }
  }
}

// exp(x), without libm's slow underflow path for -inf and the masked scores' -1e9.
inline float exp_or_zero(float x) { return x < -110.0f ? 0.0f : std::exp(x); }

template <typename F>
struct ForwardArgs {
  const F *q, *k, *v;
  F* out;
  float* lse;
};

// Output rows [q0, q0 + nq) of one (batch, head) and their log-sum-exps.
template <typename F>
void forward_task(const Head& hd, std::int64_t bh, std::int64_t q0, std::int64_t nq, const ForwardArgs<F>& g,
                  std::vector<float>& buf) {
  const AttentionDesc& a = hd.a;
  const std::int64_t d = a.d, dv = a.dv, dvp = padded(dv);
  Scratch scratch(buf, a, 6);
  float *kt = scratch.take(), *vb = scratch.take(), *qs = scratch.take(), *s = scratch.take(),
        *acc = scratch.take(), *m = scratch.take(), *l = m + kBlock;
  const std::int64_t d_ld = row_step(a, d), dv_ld = row_step(a, dv);
  const F* k = g.k + row_at(a, bh, 0, a.tk, d);
  const F* v = g.v + row_at(a, bh, 0, a.tk, dv);
  load_rows(g.q + row_at(a, bh, q0, a.tq, d), d_ld, nq, d, a.scale, qs, d);
  std::fill(acc, acc + nq * dvp, 0.0f);
  std::fill(m, m + nq, -kInf);
  std::fill(l, l + nq, 0.0f);
  const std::int64_t key_end = hd.key_end(q0 + nq - 1);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += kBlock) {
    const std::int64_t n = std::min(kBlock, key_end - j0), np = padded(n);
    load_transposed(k + j0 * d_ld, d_ld, n, d, 1.0f, kt);
    load_rows(v + j0 * dv_ld, dv_ld, n, dv, 1.0f, vb, dvp);
    tiles::gemm(nq, np, d, qs, d, 1, kt, kBlock, s, kBlock, false);
    mask_scores(hd, {q0, nq, j0, n, false}, s);
    for (std::int64_t r = 0; r < nq; ++r) {
      float* sr = s + r * kBlock;
      std::fill(sr + n, sr + np, -kInf);
      Vec top = tiles::splat(-kInf);
      for (std::int64_t j = 0; j < np; j += kLanes) {
        const Vec x = tiles::load(sr + j);
        top = x > top ? x : top;
      }
      const float m_new = std::max(m[r], tiles::max(top)), correction = exp_or_zero(m[r] - m_new);
      Vec sum{};
      for (std::int64_t j = 0; j < np; j += kLanes) {
        const Vec p = tiles::exp(tiles::load(sr + j) - m_new);
        tiles::store(sr + j, p);
        sum += p;
      }
      l[r] = l[r] * correction + tiles::sum(sum);
      m[r] = m_new;
      float* acc_r = acc + r * dvp;
      for (std::int64_t c = 0; c < dvp; ++c) acc_r[c] *= correction;
      if (a.dropout_rate > 0)
        for (std::int64_t j = 0; j < n; ++j) sr[j] *= hd.keep(q0 + r, j0 + j);
    }
    tiles::gemm(nq, dvp, n, s, kBlock, 1, vb, dvp, acc, dvp, true);
  }
  F* out = g.out + row_at(a, bh, q0, a.tq, dv);
  float* lse = g.lse + bh * a.tq + q0;
  for (std::int64_t r = 0; r < nq; ++r) {
    const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;  // no keys at all: zeros
    for (std::int64_t c = 0; c < dv; ++c) out[r * dv_ld + c] = Elem<F>::store(acc[r * dvp + c] * inv);
    // A row whose every score is masked: its probabilities are 1 / tk, marked by lse = +inf.
    lse[r] = m[r] <= kMaskedScore ? kInf : m[r] + std::log(l[r]);
  }
}

template <typename F>
struct BackwardArgs {
  const F *q, *k, *v, *dout;
  const float *lse, *delta;
  F *dq, *dk, *dv;
};

// Rows [row0, row0 + n) of a per-row float array into dst, padded with zeros to kBlock.
void load_row_values(const float* src, std::int64_t row0, std::int64_t n, float* dst) {
  std::fill(std::copy(src + row0, src + row0 + n, dst), dst + kBlock, 0.0f);
}

// dk and dv of keys [j0, j0 + n) of one (batch, head), over every query row; and, when dq_all
// (float32 [tq, padded d]) is not null, the keys' terms of every row's dq added to it.
template <typename F>
void key_block_task(const Head& hd, std::int64_t bh, std::int64_t j0, std::int64_t n,
                    const BackwardArgs<F>& g, std::vector<float>& buf, float* dq_all) {
  const AttentionDesc& a = hd.a;
  const std::int64_t d = a.d, dv = a.dv, dp = padded(d), dvp = padded(dv);
  Scratch scratch(buf, a, 12);
  float *kb = scratch.take(), *ks = scratch.take(), *vb = scratch.take(), *dk = scratch.take(),
        *dvv = scratch.take(), *qt = scratch.take(), *qs = scratch.take(), *dot = scratch.take(),
        *dob = scratch.take(), *st = scratch.take(), *dpt = scratch.take(), *lse = scratch.take(),
        *delta = lse + kBlock;
  const std::int64_t d_ld = row_step(a, d), dv_ld = row_step(a, dv);
  const F* k = g.k + row_at(a, bh, j0, a.tk, d);
  load_rows(k, d_ld, n, d, 1.0f, kb, d);
  if (dq_all) load_rows(k, d_ld, n, d, a.scale, ks, dp);
  load_rows(g.v + row_at(a, bh, j0, a.tk, dv), dv_ld, n, dv, 1.0f, vb, dv);
  std::fill(dk, dk + n * dp, 0.0f);
  std::fill(dvv, dvv + n * dvp, 0.0f);
  for (std::int64_t i0 = hd.first_row(j0); i0 < a.tq; i0 += kBlock) {
    const std::int64_t nr = std::min(kBlock, a.tq - i0), nrp = padded(nr), row0 = bh * a.tq + i0;
    const F *q = g.q + row_at(a, bh, i0, a.tq, d), *dout = g.dout + row_at(a, bh, i0, a.tq, dv);
    load_transposed(q, d_ld, nr, d, a.scale, qt);
    load_rows(q, d_ld, nr, d, a.scale, qs, dp);
    load_transposed(dout, dv_ld, nr, dv, 1.0f, dot);
    load_rows(dout, dv_ld, nr, dv, 1.0f, dob, dvp);
    load_row_values(g.lse, row0, nr, lse);
    load_row_values(g.delta, row0, nr, delta);
    const ScoreBlock b{i0, nr, j0, n, true};
    tiles::gemm(n, nrp, d, kb, d, 1, qt, kBlock, st, kBlock, false);  // scores^T
    mask_scores(hd, b, st);
    tiles::gemm(n, nrp, dv, vb, dv, 1, dot, kBlock, dpt, kBlock, false);  // (dout v^T)^T
    probabilities_and_grads(hd, b, lse, delta, st, dpt);
    tiles::gemm(n, dvp, nr, st, kBlock, 1, dob, dvp, dvv, dvp, true);  // dv += p^T dout
    tiles::gemm(n, dp, nr, dpt, kBlock, 1, qs, dp, dk, dp, true);      // dk += ds^T q scale
    if (dq_all)
      tiles::gemm(nr, dp, n, dpt, 1, kBlock, ks, dp, dq_all + i0 * dp, dp, true);  // dq += ds k scale
  }
  store_rows(dk, dp, n, d, g.dk + row_at(a, bh, j0, a.tk, d), d_ld);
  store_rows(dvv, dvp, n, dv, g.dv + row_at(a, bh, j0, a.tk, dv), dv_ld);
}

// dq of query rows [q0, q0 + nq) of one (batch, head), over every key: the sums key_block_task
// adds to dq_all, in the same order.
template <typename F>
void query_block_task(const Head& hd, std::int64_t bh, std::int64_t q0, std::int64_t nq,
                      const BackwardArgs<F>& g, std::vector<float>& buf) {
  const AttentionDesc& a = hd.a;
  const std::int64_t d = a.d, dv = a.dv, dp = padded(d), row0 = bh * a.tq + q0;
  const std::int64_t d_ld = row_step(a, d), dv_ld = row_step(a, dv);
  Scratch scratch(buf, a, 9);
  float *kt = scratch.take(), *ks = scratch.take(), *vt = scratch.take(), *qs = scratch.take(),
        *dob = scratch.take(), *dq = scratch.take(), *s = scratch.take(), *dps = scratch.take(),
        *lse = scratch.take(), *delta = lse + kBlock;
  load_rows(g.q + row_at(a, bh, q0, a.tq, d), d_ld, nq, d, a.scale, qs, d);
  load_rows(g.dout + row_at(a, bh, q0, a.tq, dv), dv_ld, nq, dv, 1.0f, dob, dv);
  load_row_values(g.lse, row0, nq, lse);
  load_row_values(g.delta, row0, nq, delta);
  std::fill(dq, dq + nq * dp, 0.0f);
  const F* k = g.k + row_at(a, bh, 0, a.tk, d);
  const F* v = g.v + row_at(a, bh, 0, a.tk, dv);
  const std::int64_t key_end = hd.key_end(q0 + nq - 1);
  for (std::int64_t j0 = 0; j0 < key_end; j0 += kBlock) {
    const std::int64_t n = std::min(kBlock, key_end - j0), np = padded(n);
    load_transposed(k + j0 * d_ld, d_ld, n, d, 1.0f, kt);
    load_rows(k + j0 * d_ld, d_ld, n, d, a.scale, ks, dp);
    load_transposed(v + j0 * dv_ld, dv_ld, n, dv, 1.0f, vt);
    const ScoreBlock b{q0, nq, j0, n, false};
    tiles::gemm(nq, np, d, qs, d, 1, kt, kBlock, s, kBlock, false);
    mask_scores(hd, b, s);
    tiles::gemm(nq, np, dv, dob, dv, 1, vt, kBlock, dps, kBlock, false);
    probabilities_and_grads(hd, b, lse, delta, s, dps);
    tiles::gemm(nq, dp, n, dps, kBlock, 1, ks, dp, dq, dp, true);
  }
  store_rows(dq, dp, nq, d, g.dq + row_at(a, bh, q0, a.tq, d), d_ld);
}

// A thread's scratch vectors, kept from call to call: a short sequence's whole work costs less
// than the page faults of fresh scratch. release_scratch() frees what is past kKeptFloats.
constexpr std::size_t kKeptFloats = std::size_t{1} << 20;
std::vector<float>& kept_scratch(int i) {
  thread_local std::vector<float> scratch[2];
  return scratch[i];
}
void release_scratch() {
  for (int i = 0; i < 2; ++i)
    if (kept_scratch(i).capacity() > kKeptFloats) std::vector<float>().swap(kept_scratch(i));
}

std::int64_t blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }
// The i-th of n blocks in the order 0, n - 1, 1, n - 2, ...: under a causal mask a block's work
// grows (queries) or shrinks (keys) with its index, and the pool hands out contiguous ranges of
// tasks, so that order gives each thread a like share of one head's blocks.
std::int64_t interleaved(std::int64_t i, std::int64_t n) { return i % 2 == 0 ? i / 2 : n - 1 - i / 2; }
}  // namespace

template <typename F>
void attention(ComputeContext& ctx, const AttentionDesc& a, const void* q, const void* k, const void* v,
               const std::uint8_t* mask, void* out, float* lse) {
  const ForwardArgs<F> g{static_cast<const F*>(q), static_cast<const F*>(k), static_cast<const F*>(v),
                         static_cast<F*>(out), lse};
  const std::int64_t qb = blocks(a.tq, kBlock);
  parallel_rows(ctx, a.b * a.h * qb, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float>& buf = kept_scratch(0);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bh = t / qb, q0 = interleaved(t % qb, qb) * kBlock;
      forward_task(Head(a, bh, mask), bh, q0, std::min(kBlock, a.tq - q0), g, buf);
    }
    release_scratch();
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
      const std::int64_t at = row_at(a, r / a.tq, r % a.tq, a.tq, a.dv);
      float s = 0.0f;
      for (std::int64_t c = 0; c < a.dv; ++c) s += Elem<F>::load(dy[at + c]) * Elem<F>::load(out[at + c]);
      delta[static_cast<std::size_t>(r)] = s;
    }
  });
  const BackwardArgs<F> g{
      static_cast<const F*>(q), static_cast<const F*>(k), static_cast<const F*>(v), dy, lse, delta.data(),
      static_cast<F*>(dq),      static_cast<F*>(dk),      static_cast<F*>(dv)};
  const std::int64_t kb = blocks(a.tk, kBlock), qb = blocks(a.tq, kBlock);
  if (a.b * a.h >= 4 * ctx.threads()) {
    // Enough heads to share out: a task takes one (batch, head) whole, every score block once.
    parallel_rows(ctx, a.b * a.h, kGrain, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float>&buf = kept_scratch(0), &dq_all = kept_scratch(1);
      for (std::int64_t bh = begin; bh < end; ++bh) {
        const Head hd(a, bh, mask);
        dq_all.assign(static_cast<std::size_t>(a.tq * padded(a.d)), 0.0f);
        for (std::int64_t j0 = 0; j0 < a.tk; j0 += kBlock)
          key_block_task(hd, bh, j0, std::min(kBlock, a.tk - j0), g, buf, dq_all.data());
        store_rows(dq_all.data(), padded(a.d), a.tq, a.d, g.dq + row_at(a, bh, 0, a.tq, a.d),
                   row_step(a, a.d));
      }
      release_scratch();
    });
    return;
  }
  // Few heads: key blocks (dk, dv) then query blocks (dq) in parallel, each recomputing its scores.
  parallel_rows(ctx, a.b * a.h * kb, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float>& buf = kept_scratch(0);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bh = t / kb, j0 = interleaved(t % kb, kb) * kBlock;
      key_block_task(Head(a, bh, mask), bh, j0, std::min(kBlock, a.tk - j0), g, buf, nullptr);
    }
    release_scratch();
  });
  parallel_rows(ctx, a.b * a.h * qb, kGrain, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float>& buf = kept_scratch(0);
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t bh = t / qb, q0 = interleaved(t % qb, qb) * kBlock;
      query_block_task(Head(a, bh, mask), bh, q0, std::min(kBlock, a.tq - q0), g, buf);
    }
    release_scratch();
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, attention)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, attention_backward)

}  // namespace lockstep::backend::cpu
