// One gradient function per OpType. Each returns the gradient for every input (undefined for
// inputs that take none), computed with ordinary ops while recording is paused.
#include <cmath>

#include "backend/kernels.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {

namespace {
using backend::UnaryOp;
using G = std::array<Tensor, 3>;

Tensor unary_grad(UnaryOp op, const OpRecord& r, const Tensor& g) {
  const Tensor& x = r.inputs[0];
  Tensor dx = Tensor::empty(x.shape());
  backend::kernels(x.device().kind)
      .unary_backward(backend::current_context(), op, x.data<float>(), r.output.data<float>(), g.data<float>(),
                      dx.data<float>(), x.numel(), r.f0, r.f1);
  return dx;
}

G binary_grad(const OpRecord& r, const Tensor& g) {
  const Tensor& a = r.inputs[0];
  const Tensor& b = r.inputs[1];
  switch (r.type) {
    case OpType::kAdd: return {sum_to_shape(g, a.shape()), sum_to_shape(g, b.shape()), {}};
    case OpType::kSub: return {sum_to_shape(g, a.shape()), sum_to_shape(neg(g), b.shape()), {}};
    case OpType::kMul: return {sum_to_shape(mul(g, b), a.shape()), sum_to_shape(mul(g, a), b.shape()), {}};
    case OpType::kDiv: {
      Tensor ga = div(g, b);
      Tensor gb = neg(div(mul(ga, a), b));
      return {sum_to_shape(ga, a.shape()), sum_to_shape(gb, b.shape()), {}};
    }
    case OpType::kMaximum: {
      // Ties send the gradient to a, as TensorFlow does.
      Tensor out = r.output;
      Tensor ma = Tensor::empty(out.shape()), mb = Tensor::empty(out.shape());
      Tensor ab = add(a, scale(out, 0.0f)), bb = add(b, scale(out, 0.0f));  // broadcast copies
      const float *pa = ab.data<float>(), *pb = bb.data<float>();
      float *qa = ma.data<float>(), *qb = mb.data<float>();
      for (std::int64_t i = 0, count = out.numel(); i < count; ++i) {
        qa[i] = pa[i] >= pb[i] ? 1.0f : 0.0f;
        qb[i] = 1.0f - qa[i];
      }
      return {sum_to_shape(mul(g, ma), a.shape()), sum_to_shape(mul(g, mb), b.shape()), {}};
    }
    default: break;
  }
  throw InternalError("binary_grad: not a binary op");
}

Tensor expand_reduced(const Tensor& g, const OpRecord& r) {
  // Re-inserts the reduced axis (size 1) so that g broadcasts against the input.
  const Tensor& x = r.inputs[0];
  if (r.i0 < 0) return g.reshape(Shape(std::vector<std::int64_t>(x.rank(), 1)));
  std::vector<std::int64_t> dims = x.shape().dims();
  dims[static_cast<std::size_t>(r.i0)] = 1;
  return g.reshape(Shape(std::move(dims)));
}

G dense_grad(const OpRecord& r, const Tensor& g_in, const std::array<bool, 3>& needs) {
  const Tensor& x = r.inputs[0];
  const Tensor& w = r.inputs[1];
  const Tensor& b = r.inputs[2];
  Tensor g = g_in;
  if (static_cast<FusedActivation>(r.i0) == FusedActivation::kRelu) {
    g = Tensor::empty(g_in.shape());
    const float* y = r.output.data<float>();
    const float* gi = g_in.data<float>();
    float* go = g.data<float>();
    for (std::int64_t i = 0, count = g.numel(); i < count; ++i) go[i] = y[i] > 0.0f ? gi[i] : 0.0f;
  }
  G out;
  // dx is skipped when x is not watched (the model's input): a whole GEMM saved per step.
  if (needs[0]) out[0] = matmul(g, w, false, true);
  if (needs[1]) out[1] = matmul(x, g, true, false);
  if (b.defined() && needs[2]) out[2] = sum(g, 0);
  return out;
}
}  // namespace

std::array<Tensor, 3> op_backward(const OpRecord& r, const Tensor& g, const std::array<bool, 3>& needs) {
  const Tensor& x = r.inputs[0];
  switch (r.type) {
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kMaximum: return binary_grad(r, g);
    case OpType::kScale: return {unary_grad(UnaryOp::kScale, r, g), {}, {}};
    case OpType::kAddScalar: return {g, {}, {}};
    case OpType::kPowScalar: return {unary_grad(UnaryOp::kPowScalar, r, g), {}, {}};
    case OpType::kClip: return {unary_grad(UnaryOp::kClip, r, g), {}, {}};
    case OpType::kNeg: return {neg(g), {}, {}};
    case OpType::kExp: return {unary_grad(UnaryOp::kExp, r, g), {}, {}};
    case OpType::kLog: return {unary_grad(UnaryOp::kLog, r, g), {}, {}};
    case OpType::kSqrt: return {unary_grad(UnaryOp::kSqrt, r, g), {}, {}};
    case OpType::kSquare: return {unary_grad(UnaryOp::kSquare, r, g), {}, {}};
    case OpType::kAbs: return {unary_grad(UnaryOp::kAbs, r, g), {}, {}};
    case OpType::kRelu: return {unary_grad(UnaryOp::kRelu, r, g), {}, {}};
    case OpType::kSigmoid: return {unary_grad(UnaryOp::kSigmoid, r, g), {}, {}};
    case OpType::kTanh: return {unary_grad(UnaryOp::kTanh, r, g), {}, {}};
    case OpType::kGelu: return {unary_grad(UnaryOp::kGelu, r, g), {}, {}};
    case OpType::kSoftmax:
    case OpType::kLogSoftmax: {
      Tensor dx = Tensor::empty(x.shape());
      const std::int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : 0;
      backend::kernels(x.device().kind)
          .softmax_backward(backend::current_context(), r.output.data<float>(), g.data<float>(),
                            dx.data<float>(), rows, cols, r.type == OpType::kLogSoftmax);
      return {dx, {}, {}};
    }
    case OpType::kMatmul: {
      const Tensor& a = r.inputs[0];
      const Tensor& b = r.inputs[1];
      const bool ta = r.i0, tb = r.i1;
      Tensor ga, gb;
      if (needs[0]) ga = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
      if (needs[1]) gb = tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false);
      return {ga, gb, {}};
    }
    case OpType::kDense: return dense_grad(r, g, needs);
    case OpType::kSum: return {add(scale(x, 0.0f), expand_reduced(g, r)), {}, {}};
    case OpType::kMean: {
      const std::int64_t count = r.i0 < 0 ? x.numel() : x.dim(static_cast<int>(r.i0));
      return {add(scale(x, 0.0f), scale(expand_reduced(g, r), count ? 1.0f / static_cast<float>(count) : 0.0f)),
              {},
              {}};
    }
    case OpType::kReduceMax: {
      // The gradient goes to the (first) arg-max of each reduced slice.
      Tensor dx = Tensor::zeros(x.shape());
      const auto* arg = r.saved[0].data<std::int64_t>();
      const float* gp = g.data<float>();
      float* dp = dx.data<float>();
      const int ax = static_cast<int>(r.i0);
      std::int64_t axis = x.dim(ax), inner = 1;
      for (std::size_t i = static_cast<std::size_t>(ax) + 1; i < x.rank(); ++i) inner *= x.shape().dims()[i];
      const std::int64_t outer = axis ? x.numel() / (axis * inner) : 0;
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t i = 0; i < inner; ++i)
          dp[(o * axis + arg[o * inner + i]) * inner + i] = gp[o * inner + i];
      return {dx, {}, {}};
    }
    case OpType::kReshape:
    case OpType::kCast: return {g.reshape(x.shape()), {}, {}};
    case OpType::kSlice: break;
    case OpType::kSparseSoftmaxCE: {
      // d loss_r / d logits = probs - onehot(label), scaled by g_r.
      const Tensor& probs = r.saved[0];
      const Tensor& lab = r.inputs[0];
      Tensor dx = Tensor::empty(probs.shape());
      const std::int64_t rows = probs.dim(0), cols = probs.dim(1);
      const float* p = probs.data<float>();
      const float* gp = g.data<float>();
      const auto* lp = lab.data<std::int64_t>();
      float* d = dx.data<float>();
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t c = 0; c < cols; ++c) d[i * cols + c] = p[i * cols + c] * gp[i];
        d[i * cols + lp[i]] -= gp[i];
      }
      return G{Tensor(), dx, Tensor()};
    }
    case OpType::kSoftmaxCE: break;
    case OpType::kDropout: return {mul(g, r.saved[0]), {}, {}};
    case OpType::kCount: break;
  }
  throw InternalError(std::string("no gradient function for op ") + op_name(r.type));
}

}  // namespace lockstep
