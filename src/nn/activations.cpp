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

// alpha * expm1(inner * min(x, 0)) where x <= 0, else x (elu: inner 1; celu: 1 / alpha). The
// condition sends a NaN to x itself.
Tensor elu_f32(const Tensor& x, float alpha, float inner = 1.0f) {
  // expm1(m) = 2t / (1 - t) with t = tanh(m / 2) in (-1, 0]: exact near 0, where exp(m) - 1
  // would cancel, and the denominator in [1, 2) for every m <= 0 (min(x, 0): no overflow, and no
  // inf * 0 gradient, for a large x).
  const Tensor t = tanh(scale(clip(x, -kInf, 0.0f), 0.5f * inner));
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

// x - tanh(x). Near 0 the difference cancels (x^3 / 3 from two numbers near x), so for |x| <= 0.5
// it is the Taylor series to x^15 in Horner form over x^2 (the next term is 1e-7 of the sum there);
// the series reads clip(x, -0.5, 0.5), so that where() never sees its overflow for a large x.
Tensor tanh_shrink_f32(const Tensor& x) {
  // x - tanh(x) = x^3 (c0 - z (c1 - z (c2 - ... z c6))), z = x^2: tanh's series coefficients.
  constexpr float kC[] = {1.0f / 3.0f,           2.0f / 15.0f,           17.0f / 315.0f,          62.0f / 2835.0f,
                          1382.0f / 155925.0f, 21844.0f / 6081075.0f, 929569.0f / 638512875.0f};
  const Tensor small = clip(x, -0.5f, 0.5f);
  const Tensor z = square(small);
  Tensor u = scale(z, kC[6]);  // z * (the sum so far)
  Tensor sum_so_far;
  for (int i = 5; i >= 0; --i) {
    sum_so_far = add_scalar(neg(u), kC[i]);
    if (i > 0) u = mul(z, sum_so_far);
  }
  const Tensor series = mul(mul(small, z), sum_so_far);
  return where(less_equal(abs(x), Tensor::scalar(0.5f, x.dtype())), series, sub(x, tanh(x)));
}

// (x + s) / 2 with s = sqrt(x^2 + b). For x <= 0 that cancels, and is b / (2 (s - x)) there, the
// denominator s + |x| >= sqrt(b); its x is min(x, 0), so that a positive x (where() takes the other
// side) gives no division by 0 and no NaN gradient. Beyond |x| = 1e18, x^2 would overflow: s is |x|.
Tensor squareplus_f32(const Tensor& x, float b) {
  constexpr float kBig = 1e18f;
  const Tensor a = abs(x);
  const Tensor s = where(greater(a, Tensor::scalar(kBig, x.dtype())), a,
                         sqrt(add_scalar(square(clip(x, -kBig, kBig)), b)));
  const Tensor nonpositive = div(Tensor::scalar(b, x.dtype()), scale(sub(s, clip(x, -kInf, 0.0f)), 2.0f));
  return where(greater(x, zero_like(x)), scale(add(x, s), 0.5f), nonpositive);
}
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

Tensor celu(const Tensor& x, float alpha) {
  return in_float32(x, [alpha](const Tensor& v) { return elu_f32(v, alpha, 1.0f / alpha); });
}

Tensor hard_tanh(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return clip(v, -1.0f, 1.0f); });
}

Tensor log_sigmoid(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return neg(softplus_f32(neg(v))); });
}

Tensor hard_shrink(const Tensor& x, float threshold) {
  // The kept side is where |x| <= threshold fails, so that a NaN is kept (Keras' |x| > threshold
  // sends it to 0).
  return in_float32(x, [threshold](const Tensor& v) {
    return where(less_equal(abs(v), Tensor::scalar(threshold, v.dtype())), zero_like(v), v);
  });
}

Tensor soft_shrink(const Tensor& x, float threshold) {
  // Exactly 0 inside (x - x), x -+ threshold outside; the gradient 0 inside and 1 outside.
  return in_float32(x, [threshold](const Tensor& v) { return sub(v, clip(v, -threshold, threshold)); });
}

Tensor tanh_shrink(const Tensor& x) { return in_float32(x, tanh_shrink_f32); }

Tensor squareplus(const Tensor& x, float b) {
  return in_float32(x, [b](const Tensor& v) { return squareplus_f32(v, b); });
}

Tensor sparse_plus(const Tensor& x) {
  // (clip(x, -1, 1) + 1)^2 / 4 is 0 for x <= -1 and the quadratic up to 1; x from 1 on (and a NaN).
  return in_float32(x, [](const Tensor& v) {
    const Tensor quadratic = scale(square(add_scalar(clip(v, -1.0f, 1.0f), 1.0f)), 0.25f);
    return where(less(v, Tensor::scalar(1.0f, v.dtype())), quadratic, v);
  });
}

Tensor sparse_sigmoid(const Tensor& x) {
  return in_float32(x, [](const Tensor& v) { return scale(add_scalar(clip(v, -1.0f, 1.0f), 1.0f), 0.5f); });
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
