// One gradient function per OpType. Each returns the gradient for every input (undefined for
// inputs that take none), computed with ordinary ops while recording is paused.
#include <algorithm>
#include <cmath>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_dense_grad.hpp"
#include "lockstep/tensor/ops_rows.hpp"

namespace lockstep {

namespace {
using G = std::array<Tensor, 3>;

Tensor unary_backward(const OpRecord& r, const Tensor& g) {
  return unary_grad(r.type, r.inputs[0], r.output, g, r.f0, r.f1);
}

// The gradient of each input the tape needs (`needs`): an input that takes none (a constant: a
// dropout mask, resize weights, a where's zero) costs no product or reduction.
G binary_grad(const OpRecord& r, const Tensor& g, const std::array<bool, 3>& needs) {
  const Tensor& a = r.inputs[0];
  const Tensor& b = r.inputs[1];
  const auto each = [&](auto ga, auto gb) -> G {
    return {needs[0] ? sum_to_shape(ga(), a.shape()) : Tensor(), needs[1] ? sum_to_shape(gb(), b.shape()) : Tensor(),
            {}};
  };
  switch (r.type) {
    case OpType::kAdd: return each([&] { return g; }, [&] { return g; });
    case OpType::kSub: return each([&] { return g; }, [&] { return neg(g); });
    case OpType::kMul: return each([&] { return mul(g, b); }, [&] { return mul(g, a); });
    case OpType::kDiv: {
      const Tensor ga = div(g, b);  // b's gradient is -ga * a / b
      return each([&] { return ga; }, [&] { return neg(div(mul(ga, a), b)); });
    }
    case OpType::kMaximum:
    case OpType::kMinimum: {
      // Ties send the gradient to a, as TensorFlow does.
      const Tensor ma = cast(r.type == OpType::kMaximum ? greater_equal(a, b) : less_equal(a, b), g.dtype());
      return each([&] { return mul(g, ma); }, [&] { return mul(g, add_scalar(neg(ma), 1.0f)); });
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

// The gradient before an op's fused activation (dense, conv2d), from the op's output y:
// relu'(x) is read off y, since y > 0 exactly where x > 0. `masked`: g is zero there already.
Tensor before_activation(FusedActivation act, const Tensor& y, const Tensor& g, bool masked) {
  return act == FusedActivation::kRelu && !masked ? unary_grad(OpType::kRelu, y, y, g) : g;
}

G dense_grad(const OpRecord& r, const Tensor& g_in, const std::array<bool, 3>& needs, bool masked) {
  const Tensor& x = r.inputs[0];
  const Tensor& w = r.inputs[1];
  const Tensor& b = r.inputs[2];
  const auto act = static_cast<FusedActivation>(r.i0);
  const bool bias_grad = b.defined() && needs[2];
  G out;
  // The ReLU's backward and the bias gradient in one op where both run.
  const Tensor g = act == FusedActivation::kRelu && !masked && bias_grad
                       ? relu_and_bias_grad(r.output, g_in, out[2])
                       : before_activation(act, r.output, g_in, masked);
  // dx is skipped when x is not watched (the model's input): a whole GEMM saved per step.
  if (needs[0]) out[0] = matmul(g, w, false, true);
  if (needs[1]) out[1] = matmul(x, g, true, false);
  if (bias_grad && !out[2].defined()) out[2] = sum(g, 0);
  return out;
}
Conv2dOptions conv_options(const OpRecord& r) {
  const auto& g = r.geometry;
  return {.strides = {g[0], g[1]},
          .dilation = {g[2], g[3]},
          .padding = {g[4], g[5], g[6], g[7]},
          .groups = g[8],
          .activation = static_cast<FusedActivation>(g[9])};
}
Pool2dOptions pool_options(const OpRecord& r) {
  const auto& g = r.geometry;
  return {.pool_size = {g[0], g[1]}, .strides = {g[2], g[3]}, .padding = {g[4], g[5], g[6], g[7]}};
}

G conv2d_grad(const OpRecord& r, const Tensor& g_in, const std::array<bool, 3>& needs, bool masked) {
  const Tensor& x = r.inputs[0];
  const Tensor& w = r.inputs[1];
  const Tensor& b = r.inputs[2];
  Conv2dOptions o = conv_options(r);
  const Tensor g = before_activation(o.activation, r.output, g_in, masked);
  o.activation = FusedActivation::kNone;  // the backward convolutions have none
  G out;
  // As for Dense: no input gradient for the model's input (the first convolution's is the
  // largest of the backward pass).
  if (needs[0]) out[0] = conv2d_input_grad(w, g, x.shape(), o);
  if (needs[1] || (b.defined() && needs[2])) {
    auto [dw, db] = conv2d_kernel_grad(x, g, w.shape(), b.defined(), o);
    out[1] = dw;
    out[2] = db;
  }
  return out;
}

// conv2d_transpose is the input gradient of a convolution c from its output y (the op's output)
// to x: x's gradient is c applied to y's gradient, the kernel's c's kernel gradient with y's
// gradient in the place of c's input and x in that of c's output gradient.
G conv2d_transpose_grad(const OpRecord& r, const Tensor& g, const std::array<bool, 3>& needs) {
  const Tensor& x = r.inputs[0];
  const Tensor& w = r.inputs[1];
  const Conv2dOptions o = conv_options(r);
  G out;
  if (needs[0]) out[0] = conv2d(g, w, Tensor(), o);
  if (needs[1]) out[1] = conv2d_kernel_grad(g, x, w.shape(), false, o)[0];
  return out;
}
}  // namespace

bool masks_by_relu(const OpRecord& r) {
  switch (r.type) {
    case OpType::kRelu: return true;
    case OpType::kDense: return static_cast<FusedActivation>(r.i0) == FusedActivation::kRelu;
    case OpType::kConv2d:
    case OpType::kConv2dMaxPool2d: return conv_options(r).activation == FusedActivation::kRelu;
    default: return false;
  }
}

bool returns_relu_masked(const OpRecord& r) { return r.type == OpType::kMaxPool2d; }

std::array<Tensor, 3> op_backward(const OpRecord& r, const Tensor& g, const std::array<bool, 3>& needs,
                                  const BackwardHints& hints) {
  const Tensor& x = r.inputs[0];
  switch (r.type) {
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kMaximum:
    case OpType::kMinimum: return binary_grad(r, g, needs);
    case OpType::kWhere: {  // inputs: a, b, the uint8 condition
      const Tensor zero = Tensor::zeros(Shape{}, g.dtype());
      const Tensor& a = r.inputs[0];
      const Tensor& b = r.inputs[1];
      return {needs[0] ? sum_to_shape(where(r.inputs[2], g, zero), a.shape()) : Tensor(),
              needs[1] ? sum_to_shape(where(r.inputs[2], zero, g), b.shape()) : Tensor(), {}};
    }
    case OpType::kScale: return {unary_backward(r, g), {}, {}};
    case OpType::kAddScalar: return {g, {}, {}};
    case OpType::kPowScalar: return {unary_backward(r, g), {}, {}};
    case OpType::kClip: return {unary_backward(r, g), {}, {}};
    case OpType::kNeg: return {neg(g), {}, {}};
    case OpType::kExp: return {unary_backward(r, g), {}, {}};
    case OpType::kLog: return {unary_backward(r, g), {}, {}};
    case OpType::kSqrt: return {unary_backward(r, g), {}, {}};
    case OpType::kSquare: return {unary_backward(r, g), {}, {}};
    case OpType::kAbs: return {unary_backward(r, g), {}, {}};
    case OpType::kRelu: return {hints.output_gradient_masked ? g : unary_backward(r, g), {}, {}};
    case OpType::kSigmoid: return {unary_backward(r, g), {}, {}};
    case OpType::kTanh: return {unary_backward(r, g), {}, {}};
    case OpType::kGelu: return {unary_backward(r, g), {}, {}};
    case OpType::kSilu: return {unary_backward(r, g), {}, {}};
    case OpType::kGatherRows: {
      // saved[0]: the row of x each output row came from; repeated rows add up.
      Tensor dx = Tensor::zeros(x.shape(), g.dtype());
      scatter_add_rows(dx, r.saved[0], g);
      return {dx, {}, {}};
    }
    case OpType::kConcat: {
      // Two blocks (no element map saved): a's elements are the first i0, b's the rest.
      if (!r.saved[0].defined()) {
        const Tensor flat = g.reshape({g.numel()});
        return {flat.slice(0, r.i0).reshape(x.shape()), flat.slice(r.i0, g.numel()).reshape(r.inputs[1].shape()), {}};
      }
      // saved: where each element of a and of b went in the output.
      const Tensor flat = g.reshape({g.numel(), 1});
      return {gather_rows(flat, r.saved[0]).reshape(x.shape()),
              gather_rows(flat, r.saved[1]).reshape(r.inputs[1].shape()), {}};
    }
    case OpType::kSoftmax:
    case OpType::kLogSoftmax: return {softmax_grad(r.output, g, r.type == OpType::kLogSoftmax), {}, {}};
    case OpType::kMatmul:
    case OpType::kBatchMatmul: {
      // The same products for one matrix or per batch entry.
      const auto product = r.type == OpType::kMatmul ? matmul : batch_matmul;
      const Tensor& a = r.inputs[0];
      const Tensor& b = r.inputs[1];
      const bool ta = r.i0, tb = r.i1;
      Tensor ga, gb;
      if (needs[0]) ga = ta ? product(b, g, tb, true) : product(g, b, false, !tb);
      if (needs[1]) gb = tb ? product(g, a, true, ta) : product(a, g, !ta, false);
      // An operand of batch 1 served every entry: its gradient is their sum.
      if (ga.defined() && ga.shape() != a.shape()) ga = sum(ga, 0, true);
      if (gb.defined() && gb.shape() != b.shape()) gb = sum(gb, 0, true);
      return {ga, gb, {}};
    }
    case OpType::kDense: return dense_grad(r, g, needs, hints.output_gradient_masked);
    // The upstream gradient broadcast over the reduced elements, whatever they hold (TF's
    // _SumGrad): a NaN or infinite element gets g, not NaN (x * 0 + g would give NaN there).
    case OpType::kSum: return {add(Tensor::zeros(x.shape(), x.dtype()), expand_reduced(g, r)), {}, {}};
    case OpType::kMean: {
      const std::int64_t count = r.i0 < 0 ? x.numel() : x.dim(static_cast<int>(r.i0));
      return {add(Tensor::zeros(x.shape(), x.dtype()),
                  scale(expand_reduced(g, r), count ? 1.0f / static_cast<float>(count) : 0.0f)),
              {},
              {}};
    }
    case OpType::kReduceMax:
      // The gradient goes to the (first) arg-max of each reduced slice.
      return {reduce_max_grad(r.saved[0], g, x.shape(), static_cast<int>(r.i0)), {}, {}};
    case OpType::kReshape: return {g.reshape(x.shape()), {}, {}};
    case OpType::kCast: return {cast(g, x.dtype()).reshape(x.shape()), {}, {}};
    case OpType::kSlice: {
      // Rows [i0, i1) of x: g there, zeros elsewhere (the tape adds into its own buffer instead).
      Tensor dx = Tensor::zeros(x.shape(), g.dtype());
      add_rows_into(dx, r.i0, g);
      return {dx, {}, {}};
    }
    case OpType::kSparseSoftmaxCE:
      // d loss_r / d logits = probs - onehot(label), scaled by g_r.
      return G{Tensor(), sparse_softmax_cross_entropy_grad(r.saved[0], r.inputs[0], g), Tensor()};
    case OpType::kSoftmaxCE: break;
    case OpType::kDropout: return {mul(g, r.saved[0]), {}, {}};
    case OpType::kConv2d: return conv2d_grad(r, g, needs, hints.output_gradient_masked);
    case OpType::kConv2dTranspose: return conv2d_transpose_grad(r, g, needs);
    case OpType::kCustom: return r.custom->backward(r, g, needs);
    case OpType::kZeroPad2d: {
      // saved[0]: the padded output's row (of C channels) for each input row.
      const std::int64_t c = x.dim(3);
      return {gather_rows(g.reshape({g.numel() / std::max<std::int64_t>(c, 1), c}), r.saved[0]).reshape(x.shape()),
              {}, {}};
    }
    case OpType::kMaxPool2d:
      return {pool2d_grad(true, x, r.output, g, pool_options(r), hints.input_from_relu), {}, {}};
    case OpType::kAvgPool2d: return {pool2d_grad(false, x, r.output, g, pool_options(r)), {}, {}};
    case OpType::kConv2dMaxPool2d:
      // Masks by the ReLU itself (from y), whether or not g already is.
      return conv2d_max_pool2d_grad(x, r.inputs[1], r.inputs[2].defined(), r.output, r.saved[0], g, conv_options(r),
                                    {r.i0, r.i1}, needs);
    case OpType::kCount: break;
  }
  throw InternalError(std::string("no gradient function for op ") + op_name(r.type));
}

}  // namespace lockstep
