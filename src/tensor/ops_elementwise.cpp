#include <cmath>

#include "tensor/op_util.hpp"

namespace lockstep {

using backend::BinaryOp;
using backend::UnaryOp;
using detail::ctx;
using detail::kern;

namespace {

backend::BroadcastDesc broadcast_desc(const char* name, const Tensor& a, const Tensor& b, Shape* out) {
  const Shape out_shape = detail::broadcast_shape(name, a.shape(), b.shape());
  LOCKSTEP_CHECK(out_shape.rank() <= static_cast<std::size_t>(backend::kMaxRank), name, ": rank ",
                 out_shape.rank(), " exceeds ", backend::kMaxRank);
  backend::BroadcastDesc d;
  d.rank = static_cast<int>(out_shape.rank());
  std::int64_t sa = 1, sb = 1;
  for (int i = d.rank - 1; i >= 0; --i) {
    d.dims[i] = out_shape.dims()[static_cast<std::size_t>(i)];
    const int ia = i - (d.rank - static_cast<int>(a.rank()));
    const int ib = i - (d.rank - static_cast<int>(b.rank()));
    const std::int64_t da = ia >= 0 ? a.shape().dims()[static_cast<std::size_t>(ia)] : 1;
    const std::int64_t db = ib >= 0 ? b.shape().dims()[static_cast<std::size_t>(ib)] : 1;
    d.a_strides[i] = da == 1 ? 0 : sa;
    d.b_strides[i] = db == 1 ? 0 : sb;
    sa *= da;
    sb *= db;
  }
  *out = out_shape;
  return d;
}

Tensor binary(const char* name, OpType type, BinaryOp op, const Tensor& a, const Tensor& b) {
  detail::check_float(name, {&a, &b});
  Shape out_shape;
  const backend::BroadcastDesc d = broadcast_desc(name, a, b, &out_shape);
  const auto& k = kern(name, a, backend::KernelOp::kBinary);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  k.binary(ctx(), op, d, a.raw_data(), b.raw_data(), out.raw_data());
  if (detail::recording({&a, &b})) {
    OpRecord r;
    r.type = type;
    r.inputs = {a, b, Tensor()};
    r.output = out;
    detail::record(r);
  }
  return out;
}

Tensor unary(const char* name, OpType type, UnaryOp op, const Tensor& a, float p0 = 0, float p1 = 0) {
  detail::check_float(name, {&a});
  const auto& k = kern(name, a, backend::KernelOp::kUnary);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  k.unary(ctx(), op, a.raw_data(), out.raw_data(), a.numel(), p0, p1);
  if (detail::recording({&a})) {
    OpRecord r;
    r.type = type;
    r.inputs = {a, Tensor(), Tensor()};
    r.output = out;
    r.f0 = p0;
    r.f1 = p1;
    detail::record(r);
  }
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", OpType::kAdd, BinaryOp::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", OpType::kSub, BinaryOp::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", OpType::kMul, BinaryOp::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", OpType::kDiv, BinaryOp::kDiv, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary("maximum", OpType::kMaximum, BinaryOp::kMaximum, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary("minimum", OpType::kMinimum, BinaryOp::kMinimum, a, b);
}

namespace {
Tensor compare(const char* name, backend::CompareOp op, const Tensor& a, const Tensor& b) {
  LOCKSTEP_CHECK(a.defined() && b.defined(), name, ": an input tensor is undefined");
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), name, ": inputs have different dtypes, ", dtype_name(a.dtype()), " and ",
                 dtype_name(b.dtype()), " (cast one of them)");
  Shape out_shape;
  const backend::BroadcastDesc d = broadcast_desc(name, a, b, &out_shape);
  const auto& k = kern(name, a, backend::KernelOp::kCompare);
  Tensor out = Tensor::empty(out_shape, DType::kU8);
  k.compare(ctx(), op, d, a.raw_data(), b.raw_data(), static_cast<std::uint8_t*>(out.raw_data()));
  return out;
}
}  // namespace

Tensor equal(const Tensor& a, const Tensor& b) { return compare("equal", backend::CompareOp::kEqual, a, b); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return compare("not_equal", backend::CompareOp::kNotEqual, a, b); }
Tensor less(const Tensor& a, const Tensor& b) { return compare("less", backend::CompareOp::kLess, a, b); }
Tensor less_equal(const Tensor& a, const Tensor& b) {
  return compare("less_equal", backend::CompareOp::kLessEqual, a, b);
}
Tensor greater(const Tensor& a, const Tensor& b) { return compare("greater", backend::CompareOp::kGreater, a, b); }
Tensor greater_equal(const Tensor& a, const Tensor& b) {
  return compare("greater_equal", backend::CompareOp::kGreaterEqual, a, b);
}

Tensor scale(const Tensor& a, float s) { return unary("scale", OpType::kScale, UnaryOp::kScale, a, s); }
Tensor add_scalar(const Tensor& a, float s) {
  return unary("add_scalar", OpType::kAddScalar, UnaryOp::kAddScalar, a, s);
}
Tensor pow_scalar(const Tensor& a, float p) {
  return unary("pow_scalar", OpType::kPowScalar, UnaryOp::kPowScalar, a, p);
}
Tensor clip(const Tensor& a, float lo, float hi) {
  LOCKSTEP_CHECK(lo <= hi, "clip: lower bound ", lo, " exceeds upper bound ", hi);
  return unary("clip", OpType::kClip, UnaryOp::kClip, a, lo, hi);
}
Tensor neg(const Tensor& a) { return unary("neg", OpType::kNeg, UnaryOp::kNeg, a); }
Tensor exp(const Tensor& a) { return unary("exp", OpType::kExp, UnaryOp::kExp, a); }
Tensor log(const Tensor& a) { return unary("log", OpType::kLog, UnaryOp::kLog, a); }
Tensor sqrt(const Tensor& a) { return unary("sqrt", OpType::kSqrt, UnaryOp::kSqrt, a); }
Tensor square(const Tensor& a) { return unary("square", OpType::kSquare, UnaryOp::kSquare, a); }
Tensor abs(const Tensor& a) { return unary("abs", OpType::kAbs, UnaryOp::kAbs, a); }
Tensor relu(const Tensor& a) { return unary("relu", OpType::kRelu, UnaryOp::kRelu, a); }
Tensor sigmoid(const Tensor& a) { return unary("sigmoid", OpType::kSigmoid, UnaryOp::kSigmoid, a); }
Tensor tanh(const Tensor& a) { return unary("tanh", OpType::kTanh, UnaryOp::kTanh, a); }
Tensor gelu(const Tensor& a, bool approximate) {
  return unary("gelu", OpType::kGelu, UnaryOp::kGelu, a, approximate ? 1.0f : 0.0f);
}
Tensor silu(const Tensor& a) { return unary("silu", OpType::kSilu, UnaryOp::kSilu, a); }

Tensor reshape(const Tensor& a, const Shape& shape) {
  Tensor out = a.reshape(shape);
  if (detail::recording({&a})) {
    OpRecord r;
    r.type = OpType::kReshape;
    r.inputs = {a, Tensor(), Tensor()};
    r.output = out;
    detail::record(r);
  }
  return out;
}

Tensor stop_gradient(const Tensor& a) { return a.reshape(a.shape()); }

Tensor cast(const Tensor& a, DType dtype) {
  if (a.dtype() == dtype) return a;
  Tensor out = a.to(dtype);
  // Between floating dtypes the gradient flows back (cast to the input's dtype).
  if (is_floating(a.dtype()) && is_floating(dtype) && detail::recording({&a})) {
    OpRecord r;
    r.type = OpType::kCast;
    r.inputs = {a, Tensor(), Tensor()};
    r.output = out;
    detail::record(r);
  }
  return out;
}

Tensor cast_and_scale(const Tensor& a, float s) {
  LOCKSTEP_CHECK(!is_floating(a.dtype()), "cast_and_scale: takes an integer tensor, got ", dtype_name(a.dtype()),
                 " (scale a floating one with scale())");
  if (!backend::supports(a.device().kind, a.dtype(), backend::KernelOp::kCastScaled))
    return scale(cast(a, DType::kF32), s);
  const auto& k = detail::kern("cast_and_scale", a, backend::KernelOp::kCastScaled);
  Tensor out = Tensor::empty(a.shape(), DType::kF32);
  k.cast_scaled(detail::ctx(), a.raw_data(), s, static_cast<float*>(out.raw_data()), a.numel());
  return out;
}

}  // namespace lockstep
