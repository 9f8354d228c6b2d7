#include "lockstep/layers/activations.hpp"

#include <limits>

#include "lockstep/tensor/ops.hpp"

namespace lockstep::layers {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();

// f computed in float32: a 16-bit input is cast up and the result back, as the ops' kernels
// compute (a chain of 16-bit ops would round after every step).
template <typename F>
Tensor in_float32(const Tensor& x, F f) {
  if (x.dtype() == DType::kF16 || x.dtype() == DType::kBF16) return cast(f(cast(x, DType::kF32)), x.dtype());
  return f(x);
}

Tensor zero_like(const Tensor& x) { return Tensor::zeros(Shape{}, x.dtype()); }

// alpha * expm1(min(x, 0)) where x <= 0, else x. The condition sends a NaN to x itself.
Tensor elu_f32(const Tensor& x, float alpha) {
  // expm1(m) = 2t / (1 - t) with t = tanh(m / 2) in (-1, 0]: exact near 0, where exp(m) - 1
  // would cancel, and the denominator in [1, 2) for every m <= 0 (min(x, 0): no overflow, and no
  // inf * 0 gradient, for a large x).
  const Tensor t = tanh(scale(clip(x, -kInf, 0.0f), 0.5f));
  const Tensor negative = scale(div(t, add_scalar(neg(t), 1.0f)), 2.0f * alpha);
  return where(less_equal(x, zero_like(x)), negative, x);
}

Tensor softplus_f32(const Tensor& x) {
  // -|x| with the gradient of x at 0 (the side where() picks there), so that softplus'(0) = 1/2.
  const Tensor n = where(greater(x, zero_like(x)), neg(x), x);
  const Tensor e = exp(n);  // in (0, 1]: no overflow
  const Tensor u = add_scalar(e, 1.0f);
  // log1p(e) = log(u) - ((u - 1) - e) / u: the rounding of u = 1 + e corrected to first order
  // (u - 1 is exact), so that a large negative x gives exp(x), not 0.
  const Tensor log1p_e = sub(log(u), div(sub(add_scalar(u, -1.0f), e), u));
  return add(relu(x), log1p_e);
}

Tensor leaky_relu_f32(const Tensor& x, float negative_slope) {
  return where(greater(x, zero_like(x)), x, scale(x, negative_slope));
}

Tensor hard_sigmoid_f32(const Tensor& x) { return scale(clip(add_scalar(x, 3.0f), 0.0f, 6.0f), 1.0f / 6.0f); }
}  // namespace

Tensor elu(const Tensor& x, float alpha) {
  return in_float32(x, [alpha](const Tensor& v) { return elu_f32(v, alpha); });
}

Tensor selu(const Tensor& x) {
  // keras/src/ops/nn.py's selu constants.
  constexpr float kAlpha = 1.67326324f, kScale = 1.05070098f;
  return in_float32(x, [](const Tensor& v) { return scale(elu_f32(v, kAlpha), kScale); });
}

Tensor leaky_relu(const Tensor& x, float negative_slope) {
  return in_float32(x, [negative_slope](const Tensor& v) { return leaky_relu_f32(v, negative_slope); });
}

Tensor relu6(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return clip(v, 0.0f, 6.0f); });
}

Tensor softplus(const Tensor& x) { return in_float32(x, softplus_f32); }

Tensor softsign(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return div(v, add_scalar(abs(v), 1.0f)); });
}

Tensor hard_sigmoid(const Tensor& x) { return in_float32(x, hard_sigmoid_f32); }

Tensor hard_silu(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return mul(v, hard_sigmoid_f32(v)); });
}

Tensor mish(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return mul(v, tanh(softplus_f32(v))); });
}

Tensor keras_relu(const Tensor& x, float negative_slope, std::optional<float> max_value, float threshold) {
  return in_float32(x, [&](const Tensor& v) {
    if (negative_slope != 0.0f && !max_value && threshold == 0.0f) return leaky_relu_f32(v, negative_slope);
    Tensor y = threshold != 0.0f ? where(greater(v, Tensor::scalar(threshold, v.dtype())), v, zero_like(v)) : relu(v);
    if (max_value) y = clip(y, 0.0f, *max_value);
    if (negative_slope != 0.0f) y = sub(y, scale(relu(add_scalar(neg(v), threshold)), negative_slope));
    return y;
  });
}

}  // namespace lockstep::layers
