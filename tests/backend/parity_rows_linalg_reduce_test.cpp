// Parity rows: matmul and batch_matmul (every transpose), dense, sum / mean, reduce_max, argmax, softmax and
// log_softmax, and their gradients; resample (a weighted gather along a middle axis).
#include <cmath>
#include <tuple>
#include <utility>

#include "backend/parity.hpp"
#include "lockstep/tensor/ops_dense_grad.hpp"
#include "lockstep/tensor/ops_resample.hpp"

namespace lockstep::parity {

namespace {
using backend::KernelOp;

// C = op(A) @ op(B) [+ bias] [relu]. The dtype rounding is relative to |A B| as well when a
// 16-bit product is rounded before the bias is added.
Expected matmul_ref(const Host& a, const Host& b, bool ta, bool tb, const Host* bias, bool relu) {
  const std::int64_t m = ta ? a.shape[1] : a.shape[0], k = ta ? a.shape[0] : a.shape[1];
  const std::int64_t n = tb ? b.shape[0] : b.shape[1];
  Expected e({m, n});
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double t = (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
        s += t;
        acc += std::fabs(t);
      }
      const double product = s;
      if (bias) s += (*bias)[j], acc += std::fabs((*bias)[j]);
      if (relu) s = std::max(s, 0.0);
      e.set(i * n + j, s, acc, bias || relu ? std::fabs(product) : 0.0);
    }
  }
  return e;
}

// resample: x (rows, in, inner) by taps index / weight (out, taps): y[r, o, :] = sum_t w[o, t]
// x[r, index[o, t], :], a tap of weight 0 skipped (an infinity or NaN it would read stays out).
struct ResampleCase {
  const char* variant;
  std::int64_t rows, in, out, taps, inner;
  Gen x;
};
Row resample_row(const ResampleCase& c) {
  // Weights in [-1, 1), every fifth one 0 (a table's padding).
  const Gen weights = [](std::mt19937_64& r, DType d, std::int64_t i) {
    return i % 5 == 4 ? 0.0 : uniform(-1, 1)(r, d, i);
  };
  return make_row(
      "resample", c.variant, "resample", floats(), {{KernelOp::kResample, {}}},
      {{{c.rows, c.in, c.inner}, c.x, {}},
       {{c.out, c.taps}, labels(c.in), DType::kI64},
       {{c.out, c.taps}, weights, DType::kF32}},
      [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{resample_taps(in[0], {in[1], in[2]})}; },
      [c](const std::vector<Host>& in, DType) {
        Expected e({c.rows, c.out, c.inner});
        for (std::int64_t r = 0; r < c.rows; ++r)
          for (std::int64_t o = 0; o < c.out; ++o)
            for (std::int64_t j = 0; j < c.inner; ++j) {
              double s = 0, acc = 0;
              for (std::int64_t t = 0; t < c.taps; ++t) {
                const double w = in[2][o * c.taps + t];
                if (w == 0) continue;
                const auto i = static_cast<std::int64_t>(in[1][o * c.taps + t]);
                const double term = w * in[0][(r * c.in + i) * c.inner + j];
                s += term;
                acc += std::fabs(term);
              }
              e.set((r * c.out + o) * c.inner + j, s, acc);
            }
        return std::vector<Expected>{e};
      });
}

struct Mkn {
  const char* variant;
  std::int64_t m, k, n;
};
// rowsplit: 2.3 MFLOP with m >= n splits C's rows over the pool; colsplit: m < n and m < 8 *
// threads splits its columns; k0 / m0: empty products.
const Mkn kMatmulCases[] = {{"odd", 37, 53, 29}, {"rowsplit", 130, 100, 90}, {"colsplit", 12, 150, 700}};

Row matmul_row(bool ta, bool tb, const Mkn& c) {
  const std::string key = std::string("matmul_") + (ta ? "t" : "n") + (tb ? "t" : "n");
  const Shape a = ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, b = tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
  return make_row(
      key, c.variant, "matmul", floats(), {{KernelOp::kGemm, {}}}, {{a, uniform(-1, 1), {}}, {b, uniform(-1, 1), {}}},
      [ta, tb](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{matmul(in[0], in[1], ta, tb)}; },
      [ta, tb](const std::vector<Host>& in, DType) {
        return std::vector<Expected>{matmul_ref(in[0], in[1], ta, tb, nullptr, false)};
      });
}

// batch_matmul: matmul_ref of each entry.
Expected batch_matmul_ref(const Host& a, const Host& b, bool ta, bool tb) {
  const std::int64_t batch = a.shape[0], m = ta ? a.shape[2] : a.shape[1], n = tb ? b.shape[1] : b.shape[2];
  const auto entry = [](const Host& h, std::int64_t i) {
    Host e;
    e.shape = Shape{h.shape[1], h.shape[2]};
    e.dtype = h.dtype;
    const std::int64_t size = h.shape[1] * h.shape[2];
    e.v.assign(h.v.begin() + i * size, h.v.begin() + (i + 1) * size);
    return e;
  };
  Expected out({batch, m, n});
  for (std::int64_t i = 0; i < batch; ++i) {
    const Expected e = matmul_ref(entry(a, i), entry(b, i), ta, tb, nullptr, false);
    for (std::int64_t j = 0; j < m * n; ++j) out.set(i * m * n + j, e.v[j], e.acc[j], e.mag[j]);
  }
  return out;
}

Row batch_matmul_row(bool ta, bool tb, std::int64_t batch, const Mkn& c) {
  const std::string key = std::string("batch_matmul_") + (ta ? "t" : "n") + (tb ? "t" : "n");
  const Shape a = ta ? Shape{batch, c.k, c.m} : Shape{batch, c.m, c.k};
  const Shape b = tb ? Shape{batch, c.n, c.k} : Shape{batch, c.k, c.n};
  return make_row(
      key, c.variant, "batch_matmul", floats(), {{KernelOp::kBatchGemm, {}}},
      {{a, uniform(-1, 1), {}}, {b, uniform(-1, 1), {}}},
      [ta, tb](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{batch_matmul(in[0], in[1], ta, tb)}; },
      [ta, tb](const std::vector<Host>& in, DType) { return std::vector<Expected>{batch_matmul_ref(in[0], in[1], ta, tb)}; });
}

Row dense_row(bool bias, bool relu, const Mkn& c, Gen gx = uniform(-1, 1)) {
  const std::string key = std::string("dense") + (bias ? "_bias" : "") + (relu ? "_relu" : "");
  // A bias or a ReLU: one op (gemm_bias_activation; on CUDA cuBLASLt's epilogue), else the GEMM.
  const std::vector<Need> needs{{bias || relu ? KernelOp::kGemmBiasActivation : KernelOp::kGemm, {}}};
  std::vector<InputSpec> inputs{{{c.m, c.k}, gx, {}}, {{c.k, c.n}, uniform(-1, 1), {}}};
  if (bias) inputs.push_back({{c.n}, uniform(-1, 1), {}});
  return make_row(
      key, c.variant, "dense", floats(), needs, inputs,
      [bias, relu](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{
            dense(in[0], in[1], bias ? in[2] : Tensor(), relu ? FusedActivation::kRelu : FusedActivation::kNone)};
      },
      [bias, relu](const std::vector<Host>& in, DType) {
        return std::vector<Expected>{matmul_ref(in[0], in[1], false, false, bias ? &in[2] : nullptr, relu)};
      });
}

// sum / mean over one axis (all when nullopt); a mean over an empty axis is 0 here (lockstep's
// choice, so that a replica with no rows contributes zeros).
Expected reduce_ref(const Host& x, std::optional<int> axis, bool keepdims, bool mean) {
  const AxisSplit v = axis ? split_at(x.shape, *axis) : AxisSplit{1, x.numel(), 1};
  Expected e(reduced(x.shape, axis, keepdims));
  for (std::int64_t o = 0; o < v.outer; ++o) {
    for (std::int64_t i = 0; i < v.inner; ++i) {
      double s = 0, acc = 0;
      for (std::int64_t a = 0; a < v.axis; ++a) {
        s += x[(o * v.axis + a) * v.inner + i];
        acc += std::fabs(x[(o * v.axis + a) * v.inner + i]);
      }
      const double d = mean ? static_cast<double>(v.axis) : 1.0;
      e.set(o * v.inner + i, v.axis ? s / d : 0.0, v.axis ? acc / d : 0.0);
    }
  }
  return e;
}

struct ReduceCase {
  const char* key;
  const char* variant;
  Shape shape;
  std::optional<int> axis;
  bool keepdims;
};
const ReduceCase kSumCases[] = {
    {"sum_all", "odd", {3, 4, 5}, std::nullopt, false},
    {"sum_all", "grain", {67591}, std::nullopt, false},
    {"sum_all", "empty", {0, 3}, std::nullopt, false},
    {"sum_all", "scalar", {}, std::nullopt, false},
    {"sum_all_keepdims", "odd", {3, 4, 5}, std::nullopt, true},
    {"sum_axis", "first", {3, 4, 5}, 0, false},
    {"sum_axis", "middle", {3, 4, 5}, 1, false},
    {"sum_axis", "last", {3, 4, 5}, 2, false},
    {"sum_axis", "rows_grain", {300, 257}, 1, false},  // inner == 1: split over the 300 sums
    {"sum_axis", "cols_grain", {300, 257}, 0, false},  // split over the 257 columns
    {"sum_axis", "cols_wide", {3, 1000}, 0, false},    // one chunk of several 256-column blocks
    {"sum_axis", "empty_axis", {2, 0, 3}, 1, false},
    {"sum_axis", "empty_outer", {0, 3}, 1, false},
    {"sum_axis_keepdims", "middle", {3, 4, 5}, 1, true},
};
const ReduceCase kMeanCases[] = {
    {"mean_all", "odd", {3, 4, 5}, std::nullopt, false},
    {"mean_all", "grain", {67591}, std::nullopt, false},
    {"mean_all", "empty", {0, 3}, std::nullopt, false},
    {"mean_axis", "middle", {3, 4, 5}, 1, false},
    {"mean_axis", "rows_grain", {300, 257}, 1, false},
    {"mean_axis", "cols_grain", {300, 257}, 0, false},
    {"mean_axis", "empty_axis", {2, 0, 3}, 1, false},
    {"mean_axis_keepdims", "last", {3, 4, 5}, -1, true},
};

Row reduce_row(const ReduceCase& c, bool mean) {
  const auto axis = c.axis ? std::optional<int>(*c.axis < 0 ? *c.axis + static_cast<int>(c.shape.rank()) : *c.axis)
                           : std::nullopt;
  return make_row(
      c.key, c.variant, mean ? "mean" : "sum", floats(), {{KernelOp::kReduceSum, {}}},
      {{c.shape, uniform(-1, 1), {}}},
      [c, mean](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{mean ? lockstep::mean(in[0], c.axis, c.keepdims) : sum(in[0], c.axis, c.keepdims)};
      },
      [axis, c, mean](const std::vector<Host>& in, DType) {
        return std::vector<Expected>{reduce_ref(in[0], axis, c.keepdims, mean)};
      });
}

// Largest value (NaN wins) and its first index, per [outer, axis, inner] slice.
std::pair<Expected, Expected> max_ref(const Host& x, int axis, bool keepdims) {
  const AxisSplit v = split_at(x.shape, axis);
  Expected best(reduced(x.shape, axis, keepdims)), arg(reduced(x.shape, axis, false));
  for (std::int64_t o = 0; o < v.outer; ++o) {
    for (std::int64_t i = 0; i < v.inner; ++i) {
      std::int64_t at = 0;
      for (std::int64_t a = 1; a < v.axis && !std::isnan(x[(o * v.axis + at) * v.inner + i]); ++a) {
        const double c = x[(o * v.axis + a) * v.inner + i];
        if (std::isnan(c) || c > x[(o * v.axis + at) * v.inner + i]) at = a;
      }
      best.set(o * v.inner + i, x[(o * v.axis + at) * v.inner + i]);
      arg.set(o * v.inner + i, static_cast<double>(at));
    }
  }
  return {best, arg};
}

struct MaxCase {
  const char* variant;
  Shape shape;
  int axis;
  Gen gen;
};

Row reduce_max_row(const MaxCase& c, bool keepdims) {
  return make_row(
      keepdims ? "reduce_max_keepdims" : "reduce_max", c.variant, "reduce_max", floats(),
      {{KernelOp::kReduceMax, {}}}, {{c.shape, c.gen, {}}},
      [c, keepdims](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{reduce_max(in[0], c.axis, keepdims)};
      },
      [c, keepdims](const std::vector<Host>& in, DType) {
        return std::vector<Expected>{max_ref(in[0], c.axis, keepdims).first};
      },
      Match::kExact);
}

Row argmax_row(const MaxCase& c, std::vector<DType> accepts) {
  const int rank = static_cast<int>(c.shape.rank());
  return make_row(
      "argmax", c.variant, "argmax", std::move(accepts), {{KernelOp::kArgmax, {}}}, {{c.shape, c.gen, {}}},
      [c](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{argmax(in[0], c.axis)}; },
      [c, rank](const std::vector<Host>& in, DType) {
        return std::vector<Expected>{max_ref(in[0], c.axis < 0 ? c.axis + rank : c.axis, false).second};
      },
      Match::kExact);
}

// Softmax / log-softmax over the last axis. log: float32 rounds x - lse relative to |x| + |lse|.
Expected softmax_ref(const Host& x, bool log) {
  Expected e(x.shape);
  const std::int64_t cols = x.shape.rank() ? x.shape[-1] : 1, rows = cols ? x.numel() / cols : 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (std::int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (std::int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    const double lse = m + std::log(s);
    for (std::int64_t c = 0; c < cols; ++c) {
      const double xc = x[r * cols + c];
      if (log) e.set(r * cols + c, xc - lse, std::fabs(xc) + std::fabs(lse));
      else e.set(r * cols + c, std::exp(xc - lse));
    }
  }
  return e;
}

Expected softmax_grad_ref(const Host& y, const Host& g, bool log) {
  Expected e(y.shape);
  const std::int64_t cols = y.shape[-1], rows = cols ? y.numel() / cols : 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0, sabs = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double t = log ? g[r * cols + c] : g[r * cols + c] * y[r * cols + c];
      s += t;
      sabs += std::fabs(t);
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const double yc = y[r * cols + c], gc = g[r * cols + c];
      if (log) e.set(r * cols + c, gc - std::exp(yc) * s, std::fabs(gc) + std::exp(yc) * sabs);
      else e.set(r * cols + c, yc * (gc - s), std::fabs(yc) * (std::fabs(gc) + sabs));
    }
  }
  return e;
}

// A Dense layer's ReLU backward and bias gradient in one op: dx = dy where y > 0, db = its column sums.
Row relu_and_bias_grad_row(const char* variant, const Shape& shape) {
  return make_row(
      "relu_and_bias_grad", variant, "relu_and_bias_grad", floats(), {{KernelOp::kReluBackwardBiasGrad, {}}},
      {{shape, uniform(-1, 1), {}}, {shape, uniform(-1, 1), {}}},
      [](const std::vector<Tensor>& in, DType) {
        Tensor db;
        Tensor dx = relu_and_bias_grad(in[0], in[1], db);
        return std::vector<Tensor>{dx, db};
      },
      [shape](const std::vector<Host>& in, DType) {
        const std::int64_t rows = shape[0], cols = shape[1];
        Expected dx(shape), db(Shape{cols});
        for (std::int64_t c = 0; c < cols; ++c) {
          double s = 0, sabs = 0;
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t i = r * cols + c;
            const double d = in[0][i] > 0 ? in[1][i] : 0.0;
            dx.set(i, d);
            s += d;
            sabs += std::fabs(d);
          }
          db.set(c, s, sabs);
        }
        return std::vector<Expected>{dx, db};
      });
}
}  // namespace

std::vector<Row> linalg_reduce_rows() {
  std::vector<Row> rows;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Mkn& c : kMatmulCases) rows.push_back(matmul_row(ta, tb, c));
  rows.push_back(matmul_row(false, false, {"k0", 3, 0, 4}));
  rows.push_back(matmul_row(false, false, {"m0", 0, 5, 4}));
  for (bool ta : {false, true})
    for (bool tb : {false, true}) rows.push_back(batch_matmul_row(ta, tb, 3, {"odd", 7, 9, 5}));
  rows.push_back(batch_matmul_row(false, false, 2, {"rowsplit", 130, 100, 90}));
  rows.push_back(batch_matmul_row(false, false, 0, {"batch0", 3, 4, 2}));
  for (bool bias : {false, true})
    for (bool relu : {false, true})
      for (const Mkn& c : {Mkn{"odd", 33, 47, 21}, Mkn{"rowsplit", 130, 100, 90}}) rows.push_back(dense_row(bias, relu, c));
  // Rows of x with a NaN give rows of NaN, the ReLU's (CUDA's after the epilogue's bias) included.
  for (bool bias : {false, true}) rows.push_back(dense_row(bias, true, {"nan", 12, 10, 5}, with_nan(-1, 1, 17)));

  for (const ReduceCase& c : kSumCases) rows.push_back(reduce_row(c, false));
  for (const ReduceCase& c : kMeanCases) rows.push_back(reduce_row(c, true));

  const MaxCase max_cases[] = {{"last", {5, 7}, 1, uniform(-3, 3)},
                               {"first", {5, 7, 3}, 0, uniform(-3, 3)},
                               {"grain", {300, 257}, 1, uniform(-3, 3)},
                               {"ties", {8, 6}, 1, coarse()},
                               {"nan", {6, 5}, 1, with_nan(-3, 3, 7)}};
  for (const MaxCase& c : max_cases) rows.push_back(reduce_max_row(c, false));
  rows.push_back(reduce_max_row({"middle", {4, 6, 3}, 1, uniform(-3, 3)}, true));
  for (const MaxCase& c : {MaxCase{"last", {5, 7}, -1, wide()}, MaxCase{"middle", {5, 7, 3}, 1, wide()},
                           MaxCase{"first", {6, 4}, 0, wide()}, MaxCase{"ties", {8, 6}, 1, coarse()}})
    rows.push_back(argmax_row(c, all_dtypes()));
  rows.push_back(argmax_row({"nan", {6, 5}, 1, with_nan(-3, 3, 7)}, all_dtypes()));  // NaN wins
  rows.back().only = floats();

  // reduce_max_grad: g lands at each slice's arg-max, zeros elsewhere.
  for (auto [variant, shape, axis] : {std::tuple<const char*, Shape, int>{"middle", {4, 5, 3}, 1},
                                      std::tuple<const char*, Shape, int>{"first", {6, 4}, 0}}) {
    const Shape out = reduced(shape, axis, false);
    rows.push_back(make_row(
        "reduce_max_grad", variant, "reduce_max_grad", floats(), {{KernelOp::kReduceMaxBackward, {}}},
        {{out, labels(shape[axis]), DType::kI64}, {out, uniform(-2, 2), {}}},
        [shape, axis](const std::vector<Tensor>& in, DType) {
          return std::vector<Tensor>{reduce_max_grad(in[0], in[1], shape, axis)};
        },
        [shape, axis](const std::vector<Host>& in, DType) {
          const AxisSplit v = split_at(shape, axis);
          Expected e(shape);
          for (std::int64_t o = 0; o < v.outer; ++o)
            for (std::int64_t i = 0; i < v.inner; ++i)
              e.set((o * v.axis + static_cast<std::int64_t>(in[0][o * v.inner + i])) * v.inner + i,
                    in[1][o * v.inner + i]);
          return std::vector<Expected>{e};
        },
        Match::kExact));
  }

  struct SoftmaxCase {
    const char* variant;
    Shape shape;
    Gen gen;
  };
  const SoftmaxCase softmax_cases[] = {{"odd", {7, 13}, uniform(-5, 5)},     {"grain", {300, 257}, uniform(-5, 5)},
                                       {"rank3", {2, 3, 4}, uniform(-5, 5)}, {"one_col", {4, 1}, uniform(-5, 5)},
                                       {"empty", {0, 5}, uniform(-5, 5)},    {"stable", {5, 9}, uniform(80, 100)}};
  for (bool log : {false, true}) {
    for (const SoftmaxCase& c : softmax_cases) {
      const char* name = log ? "log_softmax" : "softmax";
      rows.push_back(make_row(
          name, c.variant, name, floats(), {{KernelOp::kSoftmax, {}}}, {{c.shape, c.gen, {}}},
          [log](const std::vector<Tensor>& in, DType) {
            return std::vector<Tensor>{log ? log_softmax(in[0]) : softmax(in[0])};
          },
          [log](const std::vector<Host>& in, DType) { return std::vector<Expected>{softmax_ref(in[0], log)}; }));
    }
    for (const Shape& s : {Shape{9, 17}, Shape{300, 257}}) {
      rows.push_back(make_row(
          log ? "log_softmax_grad" : "softmax_grad", s.numel() > 1000 ? "grain" : "odd", "softmax_grad", floats(),
          {{KernelOp::kSoftmaxBackward, {}}}, {{s, log ? uniform(-5, 0) : uniform(0, 1), {}}, {s, uniform(-1, 1), {}}},
          [log](const std::vector<Tensor>& in, DType) {
            return std::vector<Tensor>{softmax_grad(in[0], in[1], log)};
          },
          [log](const std::vector<Host>& in, DType) {
            return std::vector<Expected>{softmax_grad_ref(in[0], in[1], log)};
          }));
    }
  }
  for (const auto& [variant, shape] : {std::pair<const char*, Shape>{"odd", {7, 13}}, {"segments", {300, 257}},
                                       {"one_unit", {9, 1}}, {"no_rows", {0, 4}}})
    rows.push_back(relu_and_bias_grad_row(variant, shape));
  // resample: a few taps over rows of channels; pixels of 3 channels over the pool's threads; rows
  // of the CPU's 64- and 16-value chunks and the values after them; NaN read by taps of weight 0
  // and not.
  for (const ResampleCase& c : {ResampleCase{"small", 3, 7, 5, 3, 4, uniform(-2, 2)},
                                ResampleCase{"pixels_over_threads", 400, 16, 24, 2, 3, uniform(-2, 2)},
                                ResampleCase{"long_rows", 2, 30, 45, 4, 300, uniform(-2, 2)},
                                ResampleCase{"shrink", 4, 40, 6, 11, 5, uniform(-2, 2)},
                                ResampleCase{"nan", 3, 9, 12, 4, 5, with_nan(-2, 2, 7)},
                                ResampleCase{"no_rows", 0, 4, 6, 2, 3, uniform(-2, 2)}})
    rows.push_back(resample_row(c));
  return rows;
}

}  // namespace lockstep::parity
