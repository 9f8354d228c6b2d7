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
  Tensor out;
  std::int64_t count;
  if (!axis) {
    out = Tensor::empty(keepdims ? Shape(std::vector<std::int64_t>(a.rank(), 1)) : Shape{});
    kern(a).reduce_sum(ctx(), a.data<float>(), out.data<float>(), 1, a.numel(), 1);
    count = a.numel();
  } else {
    const int ax = detail::normalize_axis(name, *axis, a.rank());
    const AxisView v = view_of(a.shape(), ax);
    out = Tensor::empty(reduced_shape(a.shape(), ax, keepdims));
    kern(a).reduce_sum(ctx(), a.data<float>(), out.data<float>(), v.outer, v.axis, v.inner);
    count = v.axis;
  }
  if (type == OpType::kMean) {
    const float s = count ? post_scale / static_cast<float>(count) : 0.0f;
    float* p = out.data<float>();
    for (std::int64_t i = 0, count = out.numel(); i < count; ++i) p[i] *= s;
  }
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
  Tensor out = Tensor::empty(reduced_shape(a.shape(), ax, keepdims));
  Tensor arg = Tensor::empty(out.shape(), DType::kI64);
  kern(a).reduce_max(ctx(), a.data<float>(), out.data<float>(), arg.data<std::int64_t>(), v.outer, v.axis,
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
  detail::check_float("argmax", {&a});
  const int ax = detail::normalize_axis("argmax", axis, a.rank());
  const AxisView v = view_of(a.shape(), ax);
  LOCKSTEP_CHECK(v.axis > 0, "argmax: empty axis ", axis, " in shape ", a.shape().str());
  Tensor arg = Tensor::empty(reduced_shape(a.shape(), ax, false), DType::kI64);
  kern(a).reduce_max(ctx(), a.data<float>(), nullptr, arg.data<std::int64_t>(), v.outer, v.axis, v.inner);
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
