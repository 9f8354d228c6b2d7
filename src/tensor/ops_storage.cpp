// Ops that move or combine memory: concat / stack, row gather and scatter, row slices, one-hot,
// and the multi-tensor reduction that collectives compute with.
#include <algorithm>
#include <utility>

#include "lockstep/tensor/ops_rows.hpp"
#include "tensor/gather_range.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

Tensor concat(const std::vector<Tensor>& tensors, int axis) {
  LOCKSTEP_CHECK(!tensors.empty(), "concat: no tensors");
  const Tensor& first = tensors[0];
  LOCKSTEP_CHECK(first.defined() && first.rank() >= 1, "concat: tensor 0 is ",
                 first.defined() ? first.shape().str() : "undefined", "; concat needs tensors of rank >= 1");
  const int a = detail::normalize_axis("concat", axis, first.rank());
  std::int64_t along = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool fits = t.defined() && t.rank() == first.rank() && t.dtype() == first.dtype() &&
                t.device().kind == first.device().kind;
    for (int d = 0; fits && d < static_cast<int>(first.rank()); ++d) fits = d == a || t.dim(d) == first.dim(d);
    LOCKSTEP_CHECK(fits, "concat: tensor ", i, " is ", t.defined() ? t.shape().str() : "undefined", " ",
                   t.defined() ? dtype_name(t.dtype()) : "", ", tensor 0 is ", first.shape().str(), " ",
                   dtype_name(first.dtype()), " (they may differ only along axis ", axis, ")");
    along += t.dim(a);
  }
  std::vector<std::int64_t> dims = first.shape().dims();
  dims[static_cast<std::size_t>(a)] = along;
  std::int64_t outer = 1;
  for (int d = 0; d < a; ++d) outer *= first.dim(d);
  // On the current context's device; the pieces may be of another kind (a host thread joining
  // replicas' GPU results), which copy_from handles. Along axis 0 each piece is one block; along
  // another, one block per index of the axes before it.
  Tensor out = Tensor::empty(Shape(std::move(dims)), first.dtype());
  const Tensor flat = out.reshape({out.numel()});
  const std::int64_t block = outer ? out.numel() / outer : 0;  // one outer index's elements
  std::int64_t at = 0;
  for (const Tensor& t : tensors) {
    const std::int64_t piece = outer ? t.numel() / outer : 0;
    if (a == 0) {
      out.slice(at, at + t.dim(0)).copy_from(t);
      at += t.dim(0);
      continue;
    }
    const Tensor src = t.reshape({t.numel()});
    for (std::int64_t o = 0; o < outer && piece > 0; ++o)
      flat.slice(o * block + at, o * block + at + piece).copy_from(src.slice(o * piece, (o + 1) * piece));
    at += piece;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors) {
  LOCKSTEP_CHECK(!tensors.empty(), "stack: no tensors");
  std::vector<Tensor> rows;
  rows.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    LOCKSTEP_CHECK(tensors[i].defined() && tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " is ",
                   tensors[i].defined() ? tensors[i].shape().str() : "undefined", ", tensor 0 is ",
                   tensors[0].shape().str());
    std::vector<std::int64_t> dims{1};
    for (auto d : tensors[i].shape().dims()) dims.push_back(d);
    rows.push_back(tensors[i].reshape(Shape(std::move(dims))));
  }
  return concat(rows, 0);
}

namespace {
// a.tail() == b.tail() for shapes of rank >= 1, without building either (gathers check it for
// each chunk of rows).
bool same_tail(const Shape& a, const Shape& b) {
  return std::equal(a.dims().begin() + 1, a.dims().end(), b.dims().begin() + 1, b.dims().end());
}

// The checked indices and the row length of a gather from src.
std::pair<Tensor, std::int64_t> gather_plan(const char* op, const Tensor& src, const Tensor& indices) {
  LOCKSTEP_CHECK(src.defined() && src.rank() >= 1, op, ": the source must have rank >= 1");
  LOCKSTEP_CHECK(indices.defined() && indices.rank() == 1, op, ": indices must be 1-D, got ",
                 indices.defined() ? indices.shape().str() : "undefined");
  Tensor idx = detail::checked_labels(op, indices, src.dim(0));
  const std::int64_t row = src.dim(0) ? src.numel() / src.dim(0) : src.shape().tail().numel();
  return {std::move(idx), row};
}
}  // namespace

Tensor gather_rows(const Tensor& src, const Tensor& indices) {
  const auto [idx, row] = gather_plan("gather_rows", src, indices);
  const auto& k = kern("gather_rows", src, backend::KernelOp::kGatherRows);
  std::vector<std::int64_t> dims = src.shape().dims();
  dims[0] = idx.numel();
  Tensor out = Tensor::empty(Shape(std::move(dims)), src.dtype());
  k.gather_rows(ctx(), src.raw_data(), static_cast<const std::int64_t*>(idx.raw_data()), idx.numel(), row, src.dim(0),
                out.raw_data());
  if (detail::recording({&src})) {
    OpRecord r;
    r.type = OpType::kGatherRows;
    r.inputs = {src, Tensor(), Tensor()};
    r.output = out;
    r.saved = {idx, Tensor()};
    detail::record(r);
  }
  return out;
}

namespace {
// dst can hold the gather of idx's rows of src as `dtype`: defined, that dtype, idx.numel() rows
// of src's row shape, and in src's memory (host memory is one memory: a replica on cpu:1 may
// fill its slice from a batch on cpu:0).
void check_gather_dst(const char* op, const Tensor& dst, const Tensor& src, std::int64_t rows, DType dtype) {
  const bool same_memory = dst.defined() && (dst.device() == src.device() || (dst.device().kind == DeviceKind::kCpu &&
                                                                               src.device().kind == DeviceKind::kCpu));
  LOCKSTEP_CHECK(same_memory && dst.dtype() == dtype && dst.rank() >= 1 && dst.dim(0) == rows &&
                     same_tail(dst.shape(), src.shape()),
                 op, ": dst ", dst.defined() ? dst.shape().str() : "undefined", " (",
                 dst.defined() ? dtype_name(dst.dtype()) : "-", " on ", dst.defined() ? dst.device().str() : "-",
                 ") cannot hold ", rows, " rows of ", src.shape().str(), " (", dtype_name(src.dtype()), " on ",
                 src.device().str(), ") as ", dtype_name(dtype));
}
}  // namespace

void gather_rows_into(Tensor& dst, const Tensor& src, const Tensor& indices) {
  const auto [idx, row] = gather_plan("gather_rows_into", src, indices);
  check_gather_dst("gather_rows_into", dst, src, idx.numel(), src.dtype());
  detail::forget_host_copy(dst);
  kern("gather_rows_into", src, backend::KernelOp::kGatherRows)
      .gather_rows(ctx(), src.raw_data(), static_cast<const std::int64_t*>(idx.raw_data()), idx.numel(), row,
                   src.dim(0), dst.raw_data());
}

void gather_rows_scaled_into(Tensor& dst, const Tensor& src, const Tensor& indices, float s) {
  LOCKSTEP_CHECK(!src.defined() || !is_floating(src.dtype()), "gather_rows_scaled_into: takes an integer source, got ",
                 dtype_name(src.dtype()), " (gather a floating one with gather_rows_into)");
  const auto [idx, row] = gather_plan("gather_rows_scaled_into", src, indices);
  check_gather_dst("gather_rows_scaled_into", dst, src, idx.numel(), DType::kF32);
  if (!backend::supports(src.device().kind, src.dtype(), backend::KernelOp::kGatherRowsScaled)) {
    dst.copy_from(cast_and_scale(gather_rows(src, idx), s));
    return;
  }
  kern("gather_rows_scaled_into", src, backend::KernelOp::kGatherRowsScaled)
      .gather_rows_scaled(ctx(), src.raw_data(), static_cast<const std::int64_t*>(idx.raw_data()), idx.numel(), row,
                          src.dim(0), s, static_cast<float*>(dst.raw_data()));
}

void detail::gather_rows_range_into(Tensor& dst, const Tensor& src, const Tensor& indices, std::int64_t begin,
                                    std::int64_t end, std::optional<float> scale) {
  const char* op = scale ? "gather_rows_scaled_into" : "gather_rows_into";
  const bool fused = !scale || !src.defined() ||
                     (!is_floating(src.dtype()) &&
                      backend::supports(src.device().kind, src.dtype(), backend::KernelOp::kGatherRowsScaled));
  if (!fused) {
    // A floating source (the op's error) or no fused kernel (its fallback): the op on slices.
    Tensor part = dst.slice(begin, end);
    return gather_rows_scaled_into(part, src, indices.slice(begin, end), *scale);
  }
  LOCKSTEP_CHECK(src.defined() && src.rank() >= 1, op, ": the source must have rank >= 1");
  check_gather_dst(op, dst, src, indices.defined() ? indices.numel() : 0, scale ? DType::kF32 : src.dtype());
  check_label_range(op, indices, begin, end, src.dim(0));
  const std::int64_t row = src.dim(0) ? src.numel() / src.dim(0) : 0;
  const std::int64_t* idx = static_cast<const std::int64_t*>(indices.raw_data()) + begin;
  void* out = static_cast<char*>(dst.raw_data()) + static_cast<std::size_t>(begin * row) * dtype_size(dst.dtype());
  detail::forget_host_copy(dst);
  const auto& k = kern(op, src, scale ? backend::KernelOp::kGatherRowsScaled : backend::KernelOp::kGatherRows);
  if (scale)
    k.gather_rows_scaled(ctx(), src.raw_data(), idx, end - begin, row, src.dim(0), *scale, static_cast<float*>(out));
  else
    k.gather_rows(ctx(), src.raw_data(), idx, end - begin, row, src.dim(0), out);
}

void scatter_add_rows(Tensor& dst, const Tensor& indices, const Tensor& src) {
  LOCKSTEP_CHECK(dst.defined() && dst.rank() >= 1 && src.defined() && src.dtype() == dst.dtype(),
                 "scatter_add_rows: dst and src must be defined tensors of one dtype");
  LOCKSTEP_CHECK(indices.defined() && indices.rank() == 1 && src.rank() >= 1 && src.dim(0) == indices.numel() &&
                     same_tail(src.shape(), dst.shape()),
                 "scatter_add_rows: src ", src.shape().str(), " does not match ",
                 indices.defined() ? indices.shape().str() : "undefined", " indices into dst ", dst.shape().str());
  const Tensor idx = detail::checked_labels("scatter_add_rows", indices, dst.dim(0));
  detail::forget_host_copy(dst);
  kern("scatter_add_rows", dst, backend::KernelOp::kScatterAddRows)
      .scatter_add_rows(ctx(), src.raw_data(), static_cast<const std::int64_t*>(idx.raw_data()), idx.numel(),
                        dst.shape().tail().numel(), dst.dim(0), dst.raw_data());
}

Tensor slice_rows(const Tensor& x, std::int64_t begin, std::int64_t end) {
  LOCKSTEP_CHECK(x.defined() && x.rank() >= 1, "slice_rows: the tensor must have rank >= 1");
  LOCKSTEP_CHECK(0 <= begin && begin <= end && end <= x.dim(0), "slice_rows: rows [", begin, ", ", end,
                 ") are not rows of ", x.shape().str());
  Tensor out = x.slice(begin, end);
  if (detail::recording({&x})) {
    OpRecord r;
    r.type = OpType::kSlice;
    r.inputs = {x, Tensor(), Tensor()};
    r.output = out;
    r.i0 = begin;
    r.i1 = end;
    detail::record(r);
  }
  return out;
}

void add_rows_into(Tensor& dst, std::int64_t begin, const Tensor& src) {
  detail::check_float("add_rows_into", {&dst, &src});
  LOCKSTEP_CHECK(dst.rank() >= 1 && src.rank() == dst.rank() && same_tail(src.shape(), dst.shape()) && begin >= 0 &&
                     begin + src.dim(0) <= dst.dim(0),
                 "add_rows_into: src ", src.shape().str(), " is not rows of dst ", dst.shape().str(), " from row ",
                 begin);
  Tensor rows = dst.slice(begin, begin + src.dim(0));
  if (rows.numel() == 0) return;
  backend::BroadcastDesc d;  // one run of rows' elements, read and written in place
  d.rank = 1;
  d.dims[0] = rows.numel();
  d.a_strides[0] = d.b_strides[0] = 1;
  detail::forget_host_copy(dst);
  kern("add_rows_into", dst, backend::KernelOp::kBinary)
      .binary(ctx(), backend::BinaryOp::kAdd, d, rows.raw_data(), src.raw_data(), rows.raw_data());
}

Tensor one_hot(const Tensor& labels, std::int64_t classes) {
  LOCKSTEP_CHECK(classes > 0, "one_hot: classes must be positive, got ", classes);
  const Tensor lab = detail::checked_labels("one_hot", labels, classes);
  Tensor out = Tensor::empty({lab.numel(), classes});
  kern("one_hot", out, backend::KernelOp::kOneHot)
      .one_hot(ctx(), static_cast<const std::int64_t*>(lab.raw_data()), lab.numel(), classes, out.raw_data());
  return out;
}

void reduce_across(ReduceOp op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                   std::int64_t begin, std::int64_t end) {
  LOCKSTEP_CHECK(!inputs.empty(), "reduce_across: no inputs");
  const Tensor& first = inputs[0];
  auto check = [&](const Tensor& t, const char* what, std::size_t i) {
    LOCKSTEP_CHECK(t.defined() && t.numel() == first.numel() && t.dtype() == first.dtype() &&
                       t.device().kind == first.device().kind,
                   "reduce_across: ", what, " ", i, " is ", t.defined() ? t.shape().str() : "undefined", " ",
                   t.defined() ? dtype_name(t.dtype()) : "", ", input 0 is ", first.shape().str(), " ",
                   dtype_name(first.dtype()));
  };
  std::vector<const void*> in;
  std::vector<void*> out;
  in.reserve(inputs.size());
  out.reserve(outputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check(inputs[i], "input", i);
    in.push_back(inputs[i].raw_data());
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    check(outputs[i], "output", i);
    out.push_back(const_cast<void*>(outputs[i].raw_data()));  // outputs are written through their handles
  }
  LOCKSTEP_CHECK(0 <= begin && begin <= end && end <= first.numel(), "reduce_across: range [", begin, ", ", end,
                 ") outside ", first.numel(), " elements");
  if (begin == end) return;
  kern("reduce_across", first, backend::KernelOp::kCombine)
      .combine(ctx(), op, in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()), begin,
               end);
}

}  // namespace lockstep
