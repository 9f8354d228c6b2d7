#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
struct AxisView {
  std::int64_t outer = 1, axis = 1, inner = 1;
};
AxisView view_of(const Shape& s, int axis) {
  AxisView v;
  for (int i = 0; i < static_cast<int>(s.rank()); ++i) {
    const auto d = s.dims()[static_cast<std::size_t>(i)];
    if (i < axis) v.outer *= d;
    else if (i == axis) v.axis = d;
    else v.inner *= d;
  }
  return v;
}
Shape reduced_shape(const Shape& s, int axis, bool keepdims) {
  std::vector<std::int64_t> dims = s.dims();
  if (keepdims) dims[static_cast<std::size_t>(axis)] = 1;
  else dims.erase(dims.begin() + axis);
  return Shape(std::move(dims));
}

Tensor reduce_sum_impl(const char* name, OpType type, const Tensor& a, std::optional<int> axis, bool keepdims,
                       float post_scale) {
  detail::check_float(name, {&a});
  const auto& k = kern(name, a, backend::KernelOp::kReduceSum);
  Shape out_shape;
  AxisView v;
  if (!axis) {
    out_shape = keepdims ? Shape(std::vector<std::int64_t>(a.rank(), 1)) : Shape{};
    v.axis = a.numel();
  } else {
    const int ax = detail::normalize_axis(name, *axis, a.rank());
    v = view_of(a.shape(), ax);
    out_shape = reduced_shape(a.shape(), ax, keepdims);
  }
  const float s = type != OpType::kMean ? post_scale : (v.axis ? post_scale / static_cast<float>(v.axis) : 0.0f);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  k.reduce_sum(ctx(), a.raw_data(), out.raw_data(), v.outer, v.axis, v.inner, s);
  if (detail::recording({&a})) {
    OpRecord r;
    r.type = type;
    r.inputs = {a, Tensor(), Tensor()};
    r.output = out;
    r.i0 = axis ? detail::normalize_axis(name, *axis, a.rank()) : -1;
    r.i1 = keepdims;
    detail::record(r);
  }
  return out;
}
}  // namespace

Tensor sum(const Tensor& a, std::optional<int> axis, bool keepdims) {
  return reduce_sum_impl("sum", OpType::kSum, a, axis, keepdims, 1.0f);
}
Tensor mean(const Tensor& a, std::optional<int> axis, bool keepdims) {
  return reduce_sum_impl("mean", OpType::kMean, a, axis, keepdims, 1.0f);
}

Tensor reduce_max(const Tensor& a, int axis, bool keepdims) {
  detail::check_float("reduce_max", {&a});
  const int ax = detail::normalize_axis("reduce_max", axis, a.rank());
  const AxisView v = view_of(a.shape(), ax);
  LOCKSTEP_CHECK(v.axis > 0, "reduce_max: empty axis ", axis, " in shape ", a.shape().str());
  const auto& k = kern("reduce_max", a, backend::KernelOp::kReduceMax);
  Tensor out = Tensor::empty(reduced_shape(a.shape(), ax, keepdims), a.dtype());
  Tensor arg = Tensor::empty(out.shape(), DType::kI64);
  k.reduce_max(ctx(), a.raw_data(), out.raw_data(), static_cast<std::int64_t*>(arg.raw_data()), v.outer, v.axis,
               v.inner);
  if (detail::recording({&a})) {
    OpRecord r;
    r.type = OpType::kReduceMax;
    r.inputs = {a, Tensor(), Tensor()};
    r.output = out;
    r.saved = {arg, Tensor()};
    r.i0 = ax;
    r.i1 = keepdims;
    detail::record(r);
  }
  return out;
}

Tensor argmax(const Tensor& a, int axis) {
  LOCKSTEP_CHECK(a.defined(), "argmax: the input tensor is undefined");
  const auto& k = kern("argmax", a, backend::KernelOp::kArgmax);
  const int ax = detail::normalize_axis("argmax", axis, a.rank());
  const AxisView v = view_of(a.shape(), ax);
  LOCKSTEP_CHECK(v.axis > 0, "argmax: empty axis ", axis, " in shape ", a.shape().str());
  Tensor arg = Tensor::empty(reduced_shape(a.shape(), ax, false), DType::kI64);
  k.argmax(ctx(), a.raw_data(), static_cast<std::int64_t*>(arg.raw_data()), v.outer, v.axis, v.inner);
  return arg;
}

Tensor sum_to_shape(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  Tensor cur = a;
  // Sum away leading dimensions that `shape` lacks, then dimensions where shape has 1.
  while (cur.rank() > shape.rank()) cur = sum(cur, 0, false);
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    if (shape.dims()[i] == 1 && cur.shape().dims()[i] != 1) cur = sum(cur, static_cast<int>(i), true);
  }
  LOCKSTEP_CHECK(cur.shape() == shape, "sum_to_shape: cannot reduce ", a.shape().str(), " to ", shape.str());
  return cur;
}

}  // namespace lockstep
