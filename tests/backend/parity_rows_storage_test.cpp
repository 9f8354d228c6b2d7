// Parity rows for every dtype: comparisons, casts, fill, concat / stack, row gather / scatter,
// one_hot and reduce_across (what collectives compute with).
#include <cmath>
#include <cstdio>
#include <limits>

#include "backend/error_marks.hpp"
#include "backend/parity.hpp"
#include "tensor/op_util.hpp"

namespace lockstep::parity {

namespace {
using backend::KernelOp;

using Compare = Tensor (*)(const Tensor&, const Tensor&);
using Test2 = bool (*)(double, double);

Row compare_row(const char* key, Compare f, Test2 test, const char* variant, const Shape& a, const Shape& b,
                const Gen& gen) {
  return make_row(
      key, variant, key, all_dtypes(), {{KernelOp::kCompare, {}}}, {{a, gen, {}}, {b, gen, {}}},
      [f](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{f(in[0], in[1])}; },
      [test](const std::vector<Host>& in, DType) {
        Expected e(broadcast(in[0].shape, in[1].shape));
        for (std::int64_t i = 0; i < e.numel(); ++i)
          e.set(i, test(in[0][broadcast_index(e.shape, in[0].shape, i)], in[1][broadcast_index(e.shape, in[1].shape, i)])
                       ? 1.0
                       : 0.0);
        return std::vector<Expected>{e};
      },
      Match::kExact);
}

Row cast_row(DType to, const char* variant, const Shape& shape) {
  return make_row(
      std::string("cast_to_") + dtype_name(to), variant, "cast", all_dtypes(), {{KernelOp::kCast, {}}},
      {{shape, cast_values(), {}}},
      [to](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{cast(in[0], to)}; },
      [to](const std::vector<Host>& in, DType from) {
        Expected e(in[0].shape);
        for (std::int64_t i = 0; i < e.numel(); ++i) e.set(i, cast_ref(in[0][i], from, to));
        return std::vector<Expected>{e};
      },
      Match::kExact);
}

// An integer tensor cast to float32 and scaled in one pass (a model's Rescaling of its pixels):
// exactly the float32 cast times the float32 scale, rounded once.
Row cast_and_scale_row(const char* variant, const Shape& shape, float s) {
  return make_row(
      "cast_and_scale", variant, "cast_and_scale", {DType::kU8, DType::kI32, DType::kI64},
      {{KernelOp::kCastScaled, {}}}, {{shape, cast_values(), {}}},
      [s](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{cast_and_scale(in[0], s)}; },
      [s](const std::vector<Host>& in, DType from) {
        Expected e(in[0].shape);
        for (std::int64_t i = 0; i < e.numel(); ++i)
          e.set(i, round_to(cast_ref(in[0][i], from, DType::kF32) * static_cast<double>(s), DType::kF32));
        return std::vector<Expected>{e};
      },
      Match::kExact);
}

Row full_row(const char* variant, double value) {
  return make_row(
      "full", variant, "full", all_dtypes(), {{KernelOp::kFill, {}}}, {},
      [value](const std::vector<Tensor>&, DType dt) {
        return std::vector<Tensor>{Tensor::full({263, 257}, value, dt)};
      },
      [value](const std::vector<Host>&, DType dt) {
        // A value goes to a floating dtype through float32, to an integer one directly.
        Expected e({263, 257});
        const double v = is_floating(dt) ? round_to(round_to(value, DType::kF32), dt) : cast_ref(value, DType::kF32, dt);
        for (std::int64_t i = 0; i < e.numel(); ++i) e.set(i, v);
        return std::vector<Expected>{e};
      },
      Match::kExact);
}

Expected concat_ref(const std::vector<Host>& in) {
  std::vector<std::int64_t> dims = in[0].shape.dims();
  dims[0] = 0;
  for (const Host& h : in) dims[0] += h.shape[0];
  Expected e{Shape(dims)};
  std::int64_t at = 0;
  for (const Host& h : in)
    for (double v : h.v) e.set(at++, v);
  return e;
}

// dst[index[r]] += src[r]; integers wrap; a 16-bit row is rounded after each addition, so the
// rounding is relative to every term summed into the element.
Expected scatter_ref(const Host& dst, const Host& idx, const Host& src, DType dt) {
  Expected e(dst.shape);
  const std::int64_t row = dst.shape.rank() > 1 ? dst.numel() / dst.shape[0] : 1;
  for (std::int64_t i = 0; i < e.numel(); ++i) e.set(i, dst[i], 0, 0);
  for (std::int64_t r = 0; r < idx.numel(); ++r) {
    for (std::int64_t c = 0; c < row; ++c) {
      const auto k = static_cast<std::size_t>(static_cast<std::int64_t>(idx[r]) * row + c);
      e.v[k] += src[r * row + c];
      e.mag[k] += std::fabs(e.v[k]) + std::fabs(src[r * row + c]);
      if (!is_floating(dt)) e.v[k] = wrap(e.v[k], dt);
    }
  }
  return e;
}

struct IndexDtype {
  const char* suffix;
  DType dtype;
};
const IndexDtype kIndexDtypes[] = {{"", DType::kI64}, {"_i32_indices", DType::kI32}, {"_u8_indices", DType::kU8}};

std::vector<Need> index_needs(KernelOp op, DType idx) {
  std::vector<Need> n{{op, {}}, {KernelOp::kFirstOutside, idx}};
  if (idx != DType::kI64) n.push_back({KernelOp::kCast, idx});
  return n;
}

// reduce_across: inputs combined in order, integers in int64 (then wrapped), floats in
// float32 (16-bit ones rounded once); a mean of integers truncates toward zero.
double combine_ref(ReduceOp op, const std::vector<double>& v, DType dt) {
  double acc = v[0];
  for (std::size_t j = 1; j < v.size(); ++j) {
    if (op == ReduceOp::kMax) acc = acc > v[j] ? acc : v[j];
    else if (op == ReduceOp::kMin) acc = acc < v[j] ? acc : v[j];
    else acc += v[j];
  }
  if (op == ReduceOp::kMean) acc = is_floating(dt) ? acc / static_cast<double>(v.size()) : std::trunc(acc / static_cast<double>(v.size()));
  return is_floating(dt) ? acc : wrap(acc, dt);
}

Row reduce_across_row(ReduceOp op, const char* variant, std::int64_t begin, std::int64_t end, bool in_place) {
  const Shape s{5, 7};
  return make_row(
      std::string("reduce_across_") + reduce_op_name(op), variant, "reduce_across", all_dtypes(),
      {{KernelOp::kCombine, {}}}, {{s, wide(), {}}, {s, wide(), {}}, {s, wide(), {}}},
      [=](const std::vector<Tensor>& in, DType dt) {
        std::vector<Tensor> src{in[0].clone(), in[1].clone(), in[2].clone()};
        if (in_place) {
          reduce_across(op, src, src, begin, end);
          return src;
        }
        std::vector<Tensor> out{Tensor::zeros(s, dt), Tensor::zeros(s, dt)};
        reduce_across(op, src, out, begin, end);
        return out;
      },
      [=](const std::vector<Host>& in, DType dt) {
        Expected e(s);
        for (std::int64_t i = 0; i < e.numel(); ++i) {
          const std::vector<double> v{in[0][i], in[1][i], in[2][i]};
          double abs_sum = 0;
          for (double x : v) abs_sum += std::fabs(x);
          if (i >= begin && i < end) e.set(i, combine_ref(op, v, dt), op == ReduceOp::kSum ? abs_sum : op == ReduceOp::kMean ? abs_sum / 3 : 0.0);
          else e.set(i, in_place ? in[0][i] : 0.0);
        }
        std::vector<Expected> outs{e, e};
        if (in_place) {  // outside the range each input keeps its own values
          outs.push_back(e);
          for (int j = 1; j < 3; ++j)
            for (std::int64_t i = 0; i < e.numel(); ++i)
              if (i < begin || i >= end) outs[static_cast<std::size_t>(j)].v[static_cast<std::size_t>(i)] = in[static_cast<std::size_t>(j)][i];
        }
        return outs;
      },
      op == ReduceOp::kMax || op == ReduceOp::kMin ? Match::kExact : Match::kRounded);
}
}  // namespace

std::vector<Row> storage_rows() {
  std::vector<Row> rows;
  struct C {
    const char* key;
    Compare f;
    Test2 test;
  };
  const C compares[] = {{"equal", equal, [](double a, double b) { return a == b; }},
                        {"not_equal", not_equal, [](double a, double b) { return a != b; }},
                        {"less", less, [](double a, double b) { return a < b; }},
                        {"less_equal", less_equal, [](double a, double b) { return a <= b; }},
                        {"greater", greater, [](double a, double b) { return a > b; }},
                        {"greater_equal", greater_equal, [](double a, double b) { return a >= b; }}};
  for (const C& c : compares) {
    rows.push_back(compare_row(c.key, c.f, c.test, "same", {6, 7}, {6, 7}, coarse()));
    rows.push_back(compare_row(c.key, c.f, c.test, "bcast", {6, 1}, {7}, coarse()));
    rows.push_back(compare_row(c.key, c.f, c.test, "empty", {0, 4}, {4}, coarse()));
    rows.push_back(compare_row(c.key, c.f, c.test, "nan", {16}, {16}, specials()));
    rows.back().only = floats();
  }
  rows.push_back(compare_row("equal", equal, compares[0].test, "row_grain", {263, 257}, {257}, coarse()));
  rows.push_back(compare_row("less", less, compares[2].test, "wide", {40, 9}, {40, 9}, wide()));

  for (DType to : kAllDTypes) rows.push_back(cast_row(to, "grain", {263, 257}));
  rows.push_back(cast_and_scale_row("pixels", {5, 7}, 1.0f / 255.0f));
  rows.push_back(cast_and_scale_row("split", {2049, 1024}, -0.37f));  // past the kernel's split size
  rows.push_back(cast_row(DType::kF16, "empty", {0, 2}));

  rows.push_back(full_row("neg_half", -2.5));
  rows.push_back(full_row("big", 70000.75));
  rows.push_back(full_row("nan", std::numeric_limits<double>::quiet_NaN()));
  rows.push_back(full_row("tiny", 1e-7));

  rows.push_back(make_row(
      "concat", "rows", "concat", all_dtypes(), {}, {{{2, 3}, wide(), {}}, {{0, 3}, wide(), {}}, {{4, 3}, wide(), {}}},
      [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{concat(in)}; },
      [](const std::vector<Host>& in, DType) { return std::vector<Expected>{concat_ref(in)}; }, Match::kExact));
  rows.push_back(make_row(
      "concat", "rank1", "concat", all_dtypes(), {}, {{{5}, wide(), {}}, {{1}, wide(), {}}, {{0}, wide(), {}}},
      [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{concat(in)}; },
      [](const std::vector<Host>& in, DType) { return std::vector<Expected>{concat_ref(in)}; }, Match::kExact));
  // concatenate along a middle axis: per leading index, a's block, then b's.
  rows.push_back(make_row(
      "concatenate", "middle_axis", "concatenate", all_dtypes(), {}, {{{2, 1, 3}, wide(), {}}, {{2, 2, 3}, wide(), {}}},
      [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{concatenate(in, 1)}; },
      [](const std::vector<Host>& in, DType) {
        Expected e(Shape{2, 3, 3});
        std::int64_t at = 0;
        for (std::int64_t o = 0; o < 2; ++o) {
          for (std::int64_t j = 0; j < 3; ++j) e.set(at++, in[0][o * 3 + j]);
          for (std::int64_t j = 0; j < 6; ++j) e.set(at++, in[1][o * 6 + j]);
        }
        return std::vector<Expected>{e};
      },
      Match::kExact));
  // transpose (2, 0, 1) of [2, 3, 4]: out[k, i, j] = x[i, j, k].
  rows.push_back(make_row(
      "transpose", "rank3", "transpose", all_dtypes(), {{KernelOp::kTranspose, {}}}, {{{2, 3, 4}, wide(), {}}},
      [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{transpose(in[0], {2, 0, 1})}; },
      [](const std::vector<Host>& in, DType) {
        Expected e(Shape{4, 2, 3});
        for (std::int64_t k = 0; k < 4; ++k)
          for (std::int64_t i = 0; i < 2; ++i)
            for (std::int64_t j = 0; j < 3; ++j) e.set((k * 2 + i) * 3 + j, in[0][(i * 3 + j) * 4 + k]);
        return std::vector<Expected>{e};
      },
      Match::kExact));
  // transpose (0, 2, 1, 3) of [3, 40, 6, 50] (attention's [b, t, h, d] <-> [b, h, t, d]), over threads.
  rows.push_back(make_row(
      "transpose", "rank4_heads_over_threads", "transpose", all_dtypes(), {{KernelOp::kTranspose, {}}},
      {{{3, 40, 6, 50}, wide(), {}}},
      [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{transpose(in[0], {0, 2, 1, 3})}; },
      [](const std::vector<Host>& in, DType) {
        Expected e(Shape{3, 6, 40, 50});
        for (std::int64_t b = 0, at = 0; b < 3; ++b)
          for (std::int64_t h = 0; h < 6; ++h)
            for (std::int64_t t = 0; t < 40; ++t)
              for (std::int64_t d = 0; d < 50; ++d) e.set(at++, in[0][((b * 40 + t) * 6 + h) * 50 + d]);
        return std::vector<Expected>{e};
      },
      Match::kExact));
  for (const Shape& s : {Shape{2, 3}, Shape{}}) {
    rows.push_back(make_row(
        "stack", s.rank() ? "matrices" : "scalars", "stack", all_dtypes(), {},
        {{s, wide(), {}}, {s, wide(), {}}, {s, wide(), {}}},
        [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{stack(in)}; },
        [s](const std::vector<Host>& in, DType) {
          std::vector<std::int64_t> dims{3};
          for (auto d : s.dims()) dims.push_back(d);
          Expected e{Shape(dims)};
          std::int64_t at = 0;
          for (const Host& h : in)
            for (double v : h.v) e.set(at++, v);
          return std::vector<Expected>{e};
        },
        Match::kExact));
  }

  struct GatherCase {
    const char* variant;
    Shape src;
    std::int64_t count;
  };
  for (const IndexDtype& id : kIndexDtypes) {
    for (const GatherCase& c : {GatherCase{"rows", {9, 4}, 14}, GatherCase{"rank1", {9}, 14},
                                GatherCase{"empty_indices", {9, 4}, 0}, GatherCase{"wide_rows", {40, 300}, 60},
                                // Large enough to be split over a multi-thread device's pool.
                                GatherCase{"batch_over_threads", {200, 784}, 300}}) {
      rows.push_back(make_row(
          std::string("gather_rows") + id.suffix, c.variant, "gather_rows", all_dtypes(),
          index_needs(KernelOp::kGatherRows, id.dtype),
          {{c.src, wide(), {}}, {{c.count}, row_indices(c.src[0]), id.dtype}},
          [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{gather_rows(in[0], in[1])}; },
          [](const std::vector<Host>& in, DType) {
            std::vector<std::int64_t> dims = in[0].shape.dims();
            dims[0] = in[1].numel();
            const std::int64_t row = in[0].numel() / in[0].shape[0];
            Expected e{Shape(dims)};
            for (std::int64_t r = 0; r < in[1].numel(); ++r)
              for (std::int64_t k = 0; k < row; ++k)
                e.set(r * row + k, in[0][static_cast<std::int64_t>(in[1][r]) * row + k]);
            return std::vector<Expected>{e};
          },
          Match::kExact));
    }
    // gather_rows_into writes rows [2, 2 + count) of a larger tensor (a slice of a batch, as a gather
    // ahead fills one): those rows are the gathered ones, the others keep their values.
    for (const GatherCase& c : {GatherCase{"slice_of_dst", {40, 300}, 20}, GatherCase{"rank1_slice", {9}, 14}}) {
      std::vector<std::int64_t> dst_dims = c.src.dims();
      dst_dims[0] = c.count + 5;
      rows.push_back(make_row(
          std::string("gather_rows_into") + id.suffix, c.variant, "gather_rows_into", all_dtypes(),
          index_needs(KernelOp::kGatherRows, id.dtype),
          {{Shape(dst_dims), wide(), {}}, {c.src, wide(), {}}, {{c.count}, row_indices(c.src[0]), id.dtype}},
          [count = c.count](const std::vector<Tensor>& in, DType) {
            Tensor dst = in[0].clone();
            Tensor part = dst.slice(2, 2 + count);
            gather_rows_into(part, in[1], in[2]);
            return std::vector<Tensor>{dst};
          },
          [](const std::vector<Host>& in, DType) {
            const std::int64_t row = in[1].numel() / in[1].shape[0];
            Expected e{in[0].shape};
            for (std::int64_t i = 0; i < in[0].numel(); ++i) e.set(i, in[0][i]);
            for (std::int64_t r = 0; r < in[2].numel(); ++r)
              for (std::int64_t k = 0; k < row; ++k)
                e.set((2 + r) * row + k, in[1][static_cast<std::int64_t>(in[2][r]) * row + k]);
            return std::vector<Expected>{e};
          },
          Match::kExact));
    }
    // Integer rows gathered as float32 times a scale (a pipeline's uint8 pixels,
    // Dataset::cast_and_scale) into rows [2, 2 + count) of a float32 tensor: exactly cast_ref
    // times the float32 scale, rounded once, as cast_and_scale; the other rows keep their values.
    for (const GatherCase& c : {GatherCase{"rows", {9, 4}, 14}, GatherCase{"empty_indices", {9, 4}, 0},
                                GatherCase{"rank1", {9}, 14}, GatherCase{"batch_over_threads", {200, 784}, 300}}) {
      std::vector<std::int64_t> dst_dims = c.src.dims();
      dst_dims[0] = c.count + 5;
      constexpr float kScale = 1.0f / 255.0f;
      rows.push_back(make_row(
          std::string("gather_rows_scaled_into") + id.suffix, c.variant, "gather_rows_scaled_into",
          {DType::kU8, DType::kI32, DType::kI64}, index_needs(KernelOp::kGatherRowsScaled, id.dtype),
          {{Shape(dst_dims), wide(), DType::kF32}, {c.src, cast_values(), {}}, {{c.count}, row_indices(c.src[0]), id.dtype}},
          [count = c.count](const std::vector<Tensor>& in, DType) {
            Tensor dst = in[0].clone();
            Tensor part = dst.slice(2, 2 + count);
            gather_rows_scaled_into(part, in[1], in[2], kScale);
            return std::vector<Tensor>{dst};
          },
          [](const std::vector<Host>& in, DType from) {
            const std::int64_t row = in[1].numel() / in[1].shape[0];
            Expected e{in[0].shape};
            for (std::int64_t i = 0; i < in[0].numel(); ++i) e.set(i, in[0][i]);
            for (std::int64_t r = 0; r < in[2].numel(); ++r)
              for (std::int64_t k = 0; k < row; ++k)
                e.set((2 + r) * row + k,
                      round_to(cast_ref(in[1][static_cast<std::int64_t>(in[2][r]) * row + k], from, DType::kF32) *
                                   static_cast<double>(kScale),
                               DType::kF32));
            return std::vector<Expected>{e};
          },
          Match::kExact));
    }
    if (id.dtype == DType::kU8) continue;
    rows.push_back(make_row(
        std::string("scatter_add_rows") + id.suffix, "repeats", "scatter_add_rows", all_dtypes(),
        index_needs(KernelOp::kScatterAddRows, id.dtype),
        // Integers stay small: a signed overflow inside the kernel would be undefined.
        {{{6, 3}, uniform(-1000, 1000), {}}, {{10}, row_indices(6), id.dtype}, {{10, 3}, uniform(-1000, 1000), {}}},
        [](const std::vector<Tensor>& in, DType) {
          Tensor dst = in[0].clone();
          scatter_add_rows(dst, in[1], in[2]);
          return std::vector<Tensor>{dst};
        },
        [](const std::vector<Host>& in, DType dt) {
          return std::vector<Expected>{scatter_ref(in[0], in[1], in[2], dt)};
        }));
  }

  for (auto [variant, n] : {std::pair<const char*, std::int64_t>{"labels", 7}, {"empty", 0}}) {
    rows.push_back(make_row(
        "one_hot", variant, "one_hot", ints(),
        {{KernelOp::kFirstOutside, {}}, {KernelOp::kCast, {}}, {KernelOp::kOneHot, DType::kF32}},
        {{{n}, labels(5), {}}},
        [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{one_hot(in[0], 5)}; },
        [](const std::vector<Host>& in, DType) {
          Expected e({in[0].numel(), 5});
          for (std::int64_t r = 0; r < in[0].numel(); ++r) e.set(r * 5 + static_cast<std::int64_t>(in[0][r]), 1.0);
          return std::vector<Expected>{e};
        },
        Match::kExact));
  }

  // The device's range check (mark_outside into the context's error mark, raised after the host's
  // next wait): the first label outside [0, 3), as {index, value}; {-1, 0} where none is.
  for (auto [variant, n] : {std::pair<const char*, std::int64_t>{"labels", 9}, {"empty", 0}}) {
    rows.push_back(make_row(
        "mark_outside", variant, "mark_outside", ints(), {{KernelOp::kMarkOutside, {}}}, {{{n}, labels(5), {}}},
        [](const std::vector<Tensor>& in, DType dt) {
          backend::ComputeContext& c = backend::current_context();
          LOCKSTEP_CHECK(backend::supports(c.device().kind, dt, KernelOp::kMarkOutside), "mark_outside: no kernel for ",
                         dtype_name(dt), " on ", c.device().str());
          backend::kernels(c.device().kind, dt)
              .mark_outside(c, in[0].raw_data(), in[0].numel(), 3, backend::error_site("mark_outside"),
                            backend::error_mark(c));
          std::string msg;
          try {
            (void)in[0].to(Device{});       // a GPU's read raises it
            detail::raise_marked_errors();  // the CPU's context is read here
          } catch (const ValueError& e) {
            msg = e.what();
          }
          long long value = 0, index = -1;
          (void)std::sscanf(msg.c_str(), "mark_outside: label %lld at index %lld", &value, &index);
          return std::vector<Tensor>{
              Tensor::from_vector(std::vector<float>{static_cast<float>(index), static_cast<float>(value)}, {2})};
        },
        [](const std::vector<Host>& in, DType) {
          Expected e({2});
          e.set(0, -1.0);
          e.set(1, 0.0);
          for (std::int64_t i = 0; i < in[0].numel(); ++i)
            if (in[0][i] >= 3) {
              e.set(0, static_cast<double>(i));
              e.set(1, in[0][i]);
              break;
            }
          return std::vector<Expected>{e};
        },
        Match::kExact));
  }

  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin})
    rows.push_back(reduce_across_row(op, "all", 0, 35, false));
  rows.push_back(reduce_across_row(ReduceOp::kSum, "range", 3, 20, false));
  rows.push_back(reduce_across_row(ReduceOp::kMean, "in_place_range", 9, 30, true));
  rows.push_back(reduce_across_row(ReduceOp::kMax, "in_place", 0, 35, true));
  return rows;
}

}  // namespace lockstep::parity
