// The backward kernels, as ops: the autograd layer computes every gradient through these and
// the ordinary ops, never through the backend directly.
#include "lockstep/tensor/ops_dense_grad.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using backend::UnaryOp;
using detail::ctx;
using detail::kern;

namespace {
UnaryOp unary_of(OpType t) {
  switch (t) {
    case OpType::kNeg: return UnaryOp::kNeg;
    case OpType::kExp: return UnaryOp::kExp;
    case OpType::kLog: return UnaryOp::kLog;
    case OpType::kSqrt: return UnaryOp::kSqrt;
    case OpType::kSquare: return UnaryOp::kSquare;
    case OpType::kAbs: return UnaryOp::kAbs;
    case OpType::kRelu: return UnaryOp::kRelu;
    case OpType::kSigmoid: return UnaryOp::kSigmoid;
    case OpType::kTanh: return UnaryOp::kTanh;
    case OpType::kGelu: return UnaryOp::kGelu;
    case OpType::kSilu: return UnaryOp::kSilu;
    case OpType::kScale: return UnaryOp::kScale;
    case OpType::kAddScalar: return UnaryOp::kAddScalar;
    case OpType::kPowScalar: return UnaryOp::kPowScalar;
    case OpType::kClip: return UnaryOp::kClip;
    default: break;
  }
  throw InternalError(std::string("unary_grad: ") + op_name(t) + " is not a unary op");
}
}  // namespace

Tensor unary_grad(OpType op, const Tensor& x, const Tensor& y, const Tensor& dy, float p0, float p1) {
  detail::check_float("unary_grad", {&x, &y, &dy});
  LOCKSTEP_CHECK(x.numel() == y.numel() && x.numel() == dy.numel(), "unary_grad: x ", x.shape().str(), ", y ",
                 y.shape().str(), " and dy ", dy.shape().str(), " differ in size");
  const UnaryOp u = unary_of(op);
  const auto& k = kern(op_name(op), x, backend::KernelOp::kUnaryBackward);
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  k.unary_backward(ctx(), u, x.raw_data(), y.raw_data(), dy.raw_data(), dx.raw_data(), x.numel(), p0, p1);
  return dx;
}

Tensor relu_and_bias_grad(const Tensor& y, const Tensor& dy, Tensor& db) {
  constexpr const char* kName = "relu_and_bias_grad";
  detail::check_float(kName, {&y, &dy});
  LOCKSTEP_CHECK(y.rank() == 2 && y.shape() == dy.shape(), kName, ": y ", y.shape().str(), " and dy ",
                 dy.shape().str(), " must be the same (rows, units)");
  if (detail::recording({&dy})) {  // a tape records the backward: the recorded sum
    Tensor dx = unary_grad(OpType::kRelu, y, y, dy);
    db = sum(dx, 0);
    return dx;
  }
  const auto& k = kern(kName, y, backend::KernelOp::kReluBackwardBiasGrad);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  db = Tensor::empty({y.dim(1)}, y.dtype());
  k.relu_backward_bias_grad(ctx(), y.raw_data(), dy.raw_data(), dx.raw_data(), db.raw_data(), y.dim(0), y.dim(1));
  return dx;
}

Tensor softmax_grad(const Tensor& y, const Tensor& dy, bool log) {
  detail::check_float("softmax_grad", {&y, &dy});
  LOCKSTEP_CHECK(y.rank() >= 1 && y.shape() == dy.shape(), "softmax_grad: y ", y.shape().str(), " and dy ",
                 dy.shape().str(), " differ");
  const auto& k = kern("softmax_grad", y, backend::KernelOp::kSoftmaxBackward);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  const std::int64_t cols = y.dim(-1), rows = cols ? y.numel() / cols : 0;
  k.softmax_backward(ctx(), y.raw_data(), dy.raw_data(), dx.raw_data(), rows, cols, log);
  return dx;
}

Tensor reduce_max_grad(const Tensor& arg, const Tensor& g, const Shape& input_shape, int axis) {
  detail::check_float("reduce_max_grad", {&g});
  LOCKSTEP_CHECK(arg.defined() && arg.dtype() == DType::kI64 && arg.numel() == g.numel(),
                 "reduce_max_grad: arg-max indices must be int64 and match g ", g.shape().str());
  const int ax = detail::normalize_axis("reduce_max_grad", axis, input_shape.rank());
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < static_cast<int>(input_shape.rank()); ++i) {
    if (i < ax) outer *= input_shape.dims()[static_cast<std::size_t>(i)];
    if (i > ax) inner *= input_shape.dims()[static_cast<std::size_t>(i)];
  }
  const auto& k = kern("reduce_max_grad", g, backend::KernelOp::kReduceMaxBackward);
  Tensor dx = Tensor::empty(input_shape, g.dtype());
  k.reduce_max_backward(ctx(), static_cast<const std::int64_t*>(arg.raw_data()), g.raw_data(), dx.raw_data(), outer,
                        input_shape[ax], inner);
  return dx;
}

Tensor sparse_softmax_cross_entropy_grad(const Tensor& probs, const Tensor& labels, const Tensor& g) {
  detail::check_float("sparse_softmax_cross_entropy_grad", {&probs, &g});
  LOCKSTEP_CHECK(probs.rank() == 2 && labels.defined() && labels.dtype() == DType::kI64 &&
                     labels.numel() == probs.dim(0) && g.numel() == probs.dim(0),
                 "sparse_softmax_cross_entropy_grad: probs ", probs.shape().str(), ", int64 labels and g ",
                 g.shape().str(), " do not match");
  const auto& k = kern("sparse_softmax_cross_entropy_grad", probs, backend::KernelOp::kSparseSoftmaxXentBackward);
  Tensor dx = Tensor::empty(probs.shape(), probs.dtype());
  k.sparse_softmax_xent_backward(ctx(), probs.raw_data(), static_cast<const std::int64_t*>(labels.raw_data()),
                                 g.raw_data(), dx.raw_data(), probs.dim(0), probs.dim(1));
  return dx;
}

}  // namespace lockstep
