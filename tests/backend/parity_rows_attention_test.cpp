// Parity rows: the fused scaled_dot_product_attention and its gradient (masks, causal, tq != tk,
// blocks and threads crossed, both layouts) against attention written out in double precision.
#include <cmath>

#include "backend/parity.hpp"
#include "lockstep/tensor/attention.hpp"

namespace lockstep::parity {

namespace {
using backend::KernelOp;

struct Case {
  const char* variant;
  std::int64_t b, h, tq, tk, d, dv;
  int mask_rank;  // 0: none; 2: [b, tk]; 3: [b, tq, tk]
  bool causal;
  // The op runs on [b, t, h, d] (AttentionOptions::heads_last): the inputs, given and checked
  // as [b, h, t, d], go through an (exact) transpose each way.
  bool heads_last = false;
};

const std::vector<int> kSwap{0, 2, 1, 3};
Tensor to_op(const Case& c, const Tensor& t) { return c.heads_last ? transpose(t, kSwap) : t; }
Tensor from_op(const Case& c, const Tensor& t) { return c.heads_last ? transpose(t, kSwap) : t; }

// The probabilities of every (e, head, i, j), as the op defines them (masked scores -1e9), and a
// bound on the scores' float32 arithmetic.
struct Probabilities {
  std::vector<double> p;
  std::vector<bool> masked;
  double score_size = 0;  // max over scores of scale * sum |q k|
};

double scale_of(const Case& c) { return static_cast<double>(1.0f / std::sqrt(static_cast<float>(c.d))); }

Probabilities probabilities(const Case& c, const Host& q, const Host& k, const Host* mask) {
  Probabilities r;
  r.p.resize(static_cast<std::size_t>(c.b * c.h * c.tq * c.tk));
  r.masked.resize(r.p.size());
  const double scale = scale_of(c);
  std::vector<double> s(static_cast<std::size_t>(c.tk));
  for (std::int64_t bh = 0; bh < c.b * c.h; ++bh) {
    const std::int64_t e = bh / c.h;
    for (std::int64_t i = 0; i < c.tq; ++i) {
      const std::int64_t row = bh * c.tq + i;
      double top = -INFINITY;
      for (std::int64_t j = 0; j < c.tk; ++j) {
        double dot = 0, size = 0;
        for (std::int64_t x = 0; x < c.d; ++x) {
          dot += q[row * c.d + x] * k[(bh * c.tk + j) * c.d + x];
          size += std::fabs(q[row * c.d + x] * k[(bh * c.tk + j) * c.d + x]);
        }
        r.score_size = std::max(r.score_size, scale * size);
        bool m = c.causal && j > i;
        if (mask) m |= (*mask)[c.mask_rank == 2 ? e * c.tk + j : (e * c.tq + i) * c.tk + j] == 0;
        r.masked[static_cast<std::size_t>(row * c.tk + j)] = m;
        s[static_cast<std::size_t>(j)] = m ? -1e9 : scale * dot;
        top = std::max(top, s[static_cast<std::size_t>(j)]);
      }
      double sum = 0;
      for (std::int64_t j = 0; j < c.tk; ++j) sum += std::exp(s[static_cast<std::size_t>(j)] - top);
      for (std::int64_t j = 0; j < c.tk; ++j)
        r.p[static_cast<std::size_t>(row * c.tk + j)] = std::exp(s[static_cast<std::size_t>(j)] - top) / sum;
    }
  }
  return r;
}

// Every float32 step's rounding, relative to the terms' magnitudes: exp of a score carries the
// score's error, so the tolerance grows with the scores' size.
double acc_factor(const Probabilities& pr) { return 10.0 * (1.0 + pr.score_size); }

Expected forward_ref(const Case& c, const std::vector<Host>& in) {
  const Probabilities pr = probabilities(c, in[0], in[1], c.mask_rank ? &in[3] : nullptr);
  const Host& v = in[2];
  Expected out({c.b, c.h, c.tq, c.dv});
  for (std::int64_t bh = 0; bh < c.b * c.h; ++bh)
    for (std::int64_t i = 0; i < c.tq; ++i)
      for (std::int64_t x = 0; x < c.dv; ++x) {
        double o = 0, mag = 0;
        for (std::int64_t j = 0; j < c.tk; ++j) {
          const double p = pr.p[static_cast<std::size_t>((bh * c.tq + i) * c.tk + j)];
          o += p * v[(bh * c.tk + j) * c.dv + x];
          mag += p * std::fabs(v[(bh * c.tk + j) * c.dv + x]);
        }
        out.set((bh * c.tq + i) * c.dv + x, o, mag * acc_factor(pr), mag);
      }
  return out;
}

// {dq, dk, dv} given dy (in[3]; the mask, if any, is in[4]).
std::vector<Expected> backward_ref(const Case& c, const std::vector<Host>& in) {
  const Host &q = in[0], &k = in[1], &v = in[2], &dy = in[3];
  const Probabilities pr = probabilities(c, q, k, c.mask_rank ? &in[4] : nullptr);
  const double scale = scale_of(c);
  Expected dq({c.b, c.h, c.tq, c.d}), dk({c.b, c.h, c.tk, c.d}), dv({c.b, c.h, c.tk, c.dv});
  const auto n = static_cast<std::size_t>(c.b * c.h * c.tq * c.tk);
  std::vector<double> ds(n), ds_mag(n);  // the scores' gradient and its terms' magnitude
  for (std::int64_t row = 0; row < c.b * c.h * c.tq; ++row) {
    const std::int64_t bh = row / c.tq;
    std::vector<double> dp(static_cast<std::size_t>(c.tk));
    double delta = 0, delta_mag = 0;
    for (std::int64_t j = 0; j < c.tk; ++j) {
      double s = 0, m = 0;
      for (std::int64_t x = 0; x < c.dv; ++x) {
        s += dy[row * c.dv + x] * v[(bh * c.tk + j) * c.dv + x];
        m += std::fabs(dy[row * c.dv + x] * v[(bh * c.tk + j) * c.dv + x]);
      }
      dp[static_cast<std::size_t>(j)] = s;
      const double p = pr.p[static_cast<std::size_t>(row * c.tk + j)];
      delta += p * s;
      delta_mag += p * m;
    }
    for (std::int64_t j = 0; j < c.tk; ++j) {
      const auto at = static_cast<std::size_t>(row * c.tk + j);
      const double p = pr.p[at];
      ds[at] = pr.masked[at] ? 0 : p * (dp[static_cast<std::size_t>(j)] - delta);
      ds_mag[at] = pr.masked[at] ? 0 : p * (std::fabs(dp[static_cast<std::size_t>(j)]) + delta_mag);
    }
  }
  const double f = acc_factor(pr);
  for (std::int64_t bh = 0; bh < c.b * c.h; ++bh) {
    for (std::int64_t i = 0; i < c.tq; ++i)
      for (std::int64_t x = 0; x < c.d; ++x) {
        double g = 0, mag = 0;
        for (std::int64_t j = 0; j < c.tk; ++j) {
          const auto at = static_cast<std::size_t>((bh * c.tq + i) * c.tk + j);
          g += ds[at] * scale * k[(bh * c.tk + j) * c.d + x];
          mag += ds_mag[at] * scale * std::fabs(k[(bh * c.tk + j) * c.d + x]);
        }
        dq.set((bh * c.tq + i) * c.d + x, g, mag * f, mag);
      }
    for (std::int64_t j = 0; j < c.tk; ++j) {
      for (std::int64_t x = 0; x < c.d; ++x) {
        double g = 0, mag = 0;
        for (std::int64_t i = 0; i < c.tq; ++i) {
          const auto at = static_cast<std::size_t>((bh * c.tq + i) * c.tk + j);
          g += ds[at] * scale * q[(bh * c.tq + i) * c.d + x];
          mag += ds_mag[at] * scale * std::fabs(q[(bh * c.tq + i) * c.d + x]);
        }
        dk.set((bh * c.tk + j) * c.d + x, g, mag * f, mag);
      }
      for (std::int64_t x = 0; x < c.dv; ++x) {
        double g = 0, mag = 0;
        for (std::int64_t i = 0; i < c.tq; ++i) {
          const double p = pr.p[static_cast<std::size_t>((bh * c.tq + i) * c.tk + j)];
          g += p * dy[(bh * c.tq + i) * c.dv + x];
          mag += p * std::fabs(dy[(bh * c.tq + i) * c.dv + x]);
        }
        dv.set((bh * c.tk + j) * c.dv + x, g, mag * f, mag);
      }
    }
  }
  return {dq, dk, dv};
}

std::vector<InputSpec> inputs_of(const Case& c, bool with_dy) {
  std::vector<InputSpec> in{{Shape{c.b, c.h, c.tq, c.d}, uniform(-1, 1), {}},
                            {Shape{c.b, c.h, c.tk, c.d}, uniform(-1, 1), {}},
                            {Shape{c.b, c.h, c.tk, c.dv}, uniform(-1, 1), {}}};
  if (with_dy) in.push_back({Shape{c.b, c.h, c.tq, c.dv}, uniform(-1, 1), {}});
  if (c.mask_rank == 2) in.push_back({Shape{c.b, c.tk}, uniform(0, 1), DType::kU8});
  if (c.mask_rank == 3) in.push_back({Shape{c.b, c.tq, c.tk}, uniform(0, 1), DType::kU8});
  return in;
}

std::string key_of(const char* base, const Case& c) {
  return std::string(base) + (c.causal ? "_causal" : "") +
         (c.mask_rank ? "_mask" + std::to_string(c.mask_rank) : "") + (c.heads_last ? "_heads_last" : "");
}

Row forward_row(const Case& c) {
  return make_row(
      key_of("attention", c), c.variant, "scaled_dot_product_attention", floats(),
      {{KernelOp::kAttention, {}}}, inputs_of(c, false),
      [c](const std::vector<Tensor>& in, DType) {
        const Tensor mask = c.mask_rank ? in[3] : Tensor();
        return std::vector<Tensor>{
            from_op(c, scaled_dot_product_attention(to_op(c, in[0]), to_op(c, in[1]), to_op(c, in[2]), mask,
                                                    {.causal = c.causal, .heads_last = c.heads_last}))};
      },
      [c](const std::vector<Host>& in, DType) { return std::vector<Expected>{forward_ref(c, in)}; });
}

Row backward_row(const Case& c) {
  return make_row(
      key_of("attention_grad", c), c.variant, "scaled_dot_product_attention", floats(),
      {{KernelOp::kAttention, {}}, {KernelOp::kAttentionBackward, {}}}, inputs_of(c, true),
      [c](const std::vector<Tensor>& in, DType) {
        const Tensor mask = c.mask_rank ? in[4] : Tensor();
        const AttentionOptions o{.causal = c.causal, .heads_last = c.heads_last};
        const Tensor q = to_op(c, in[0]), k = to_op(c, in[1]), v = to_op(c, in[2]);
        Tensor lse;
        const Tensor out = scaled_dot_product_attention(q, k, v, mask, o, &lse);
        const auto g = scaled_dot_product_attention_grad(q, k, v, mask, out, lse, to_op(c, in[3]), o);
        return std::vector<Tensor>{from_op(c, g[0]), from_op(c, g[1]), from_op(c, g[2])};
      },
      [c](const std::vector<Host>& in, DType) { return backward_ref(c, in); });
}
}  // namespace

std::vector<Row> attention_rows() {
  const Case small{"odd", 2, 3, 5, 7, 4, 3, 0, false};
  const Case causal{"square", 1, 2, 9, 9, 8, 8, 0, true};
  const Case keys_mask{"keyblocks", 2, 1, 6, 70, 5, 6, 2, false};
  const Case query_mask{"queryblocks", 2, 2, 40, 33, 3, 2, 3, true};
  const Case grain{"grain", 2, 2, 70, 130, 16, 16, 0, false};
  const Case grain_causal{"grain", 1, 3, 100, 100, 8, 4, 0, true};
  const Case empty{"batch0", 0, 2, 3, 4, 2, 2, 0, false};
  // MultiHeadAttention's layout: heads interleaved in each row; many heads (the backward's
  // one-task-per-head schedule) and few (key and query blocks), masked and causal.
  const Case heads_mask{"keyblocks", 2, 3, 6, 70, 5, 6, 2, false, true};
  const Case heads_causal{"grain", 1, 3, 100, 100, 8, 4, 0, true, true};
  const Case many_heads{"per_head", 4, 4, 9, 9, 8, 8, 3, true, true};
  std::vector<Row> rows;
  for (const Case& c :
       {small, causal, keys_mask, query_mask, grain, grain_causal, empty, heads_mask, heads_causal})
    rows.push_back(forward_row(c));
  for (const Case& c :
       {small, causal, keys_mask, query_mask, grain_causal, heads_mask, heads_causal, many_heads})
    rows.push_back(backward_row(c));
  return rows;
}

}  // namespace lockstep::parity
