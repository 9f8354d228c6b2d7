#include <cmath>

#include "tensor/op_util.hpp"

namespace lockstep {

using backend::BinaryOp;
using backend::UnaryOp;
using detail::ctx;
using detail::kern;

namespace {

// An operand's element strides in an output of `out` it broadcasts to (0 on broadcast dimensions).
void broadcast_strides(const Shape& out, const Shape& operand, std::int64_t* strides) {
  const int rank = static_cast<int>(out.rank()), shift = rank - static_cast<int>(operand.rank());
  std::int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const std::int64_t d = i >= shift ? operand.dims()[static_cast<std::size_t>(i - shift)] : 1;
    strides[i] = d == 1 ? 0 : s;
    s *= d;
  }
}

backend::BroadcastDesc broadcast_to(const char* name, const Shape& out_shape, const Tensor& a, const Tensor& b) {
  LOCKSTEP_CHECK(out_shape.rank() <= static_cast<std::size_t>(backend::kMaxRank), name, ": rank ",
                 out_shape.rank(), " exceeds ", backend::kMaxRank);
  backend::BroadcastDesc d;
  d.rank = static_cast<int>(out_shape.rank());
  for (int i = 0; i < d.rank; ++i) d.dims[i] = out_shape.dims()[static_cast<std::size_t>(i)];
  broadcast_strides(out_shape, a.shape(), d.a_strides);
  broadcast_strides(out_shape, b.shape(), d.b_strides);
  return d;
}

backend::BroadcastDesc broadcast_desc(const char* name, const Tensor& a, const Tensor& b, Shape* out) {
  *out = detail::broadcast_shape(name, a.shape(), b.shape());
  return broadcast_to(name, *out, a, b);
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

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_float("where", {&a, &b});
  LOCKSTEP_CHECK(cond.defined(), "where: the condition is undefined");
  // Any dtype's condition as uint8 0 / 1, the kernel's; a uint8 one as it is (nonzero holds).
  const Tensor keep = cond.dtype() == DType::kU8 ? cond : not_equal(cond, Tensor::zeros(Shape{}, cond.dtype()));
  LOCKSTEP_CHECK(keep.device().kind == a.device().kind, "where: the condition is on ", keep.device().str(),
                 " and the values on ", a.device().str());
  const Shape out_shape =
      detail::broadcast_shape("where", keep.shape(), detail::broadcast_shape("where", a.shape(), b.shape()));
  backend::WhereDesc w;
  w.ab = broadcast_to("where", out_shape, a, b);
  broadcast_strides(out_shape, keep.shape(), w.cond_strides);
  const auto& k = kern("where", a, backend::KernelOp::kWhere);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  k.where(ctx(), w, static_cast<const std::uint8_t*>(keep.raw_data()), a.raw_data(), b.raw_data(), out.raw_data());
  if (detail::recording({&a, &b})) {
    OpRecord r;
    r.type = OpType::kWhere;
    r.inputs = {a, b, keep};
    r.output = out;
    detail::record(r);
  }
  return out;
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
