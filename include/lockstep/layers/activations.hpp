#pragma once
// Keras 3's activation functions beyond the ops' own (keras/src/activations/activations.py and
// keras/src/ops/nn.py, the TensorFlow backend's definitions): built from recorded ops, so that
// their gradients, every floating dtype and every backend are the ops'. A float16 or bfloat16
// input is computed in float32 and cast back, as the ops' kernels compute. NaN in is NaN out
// (Keras' ReLU layer with a threshold excepted, whose where() makes it 0, as Keras'). Keras' own
// hard_shrink and soft_shrink make a NaN 0 too (their where()s); lockstep's keep it NaN.
#include <optional>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::layers {

/// x for x > 0, alpha * (exp(x) - 1) otherwise (computed without cancellation near 0, and from
/// min(x, 0): no overflow, and no inf * 0 gradient, for a large x).
Tensor elu(const Tensor& x, float alpha = 1.0f);
/// scale * elu(x, alpha) with Keras' alpha = 1.67326324, scale = 1.05070098.
Tensor selu(const Tensor& x);
/// x for x > 0, negative_slope * x otherwise (the function's default 0.2; the LeakyReLU layer's is 0.3).
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.2f);
/// min(max(x, 0), 6).
Tensor relu6(const Tensor& x);
/// log(1 + exp(x)) as relu(x) + log1p(exp(-|x|)): exact to float32's rounding for every x.
Tensor softplus(const Tensor& x);
/// x / (1 + |x|).
Tensor softsign(const Tensor& x);
/// Keras 3's relu6(x + 3) / 6.
Tensor hard_sigmoid(const Tensor& x);
/// x * hard_sigmoid(x) (Keras' hard_silu, alias hard_swish).
Tensor hard_silu(const Tensor& x);
/// x * tanh(softplus(x)).
Tensor mish(const Tensor& x);
/// Keras 3's celu: max(x, 0) + alpha * expm1(min(x, 0) / alpha), elu's stable form.
Tensor celu(const Tensor& x, float alpha = 1.0f);
/// clip(x, -1, 1).
Tensor hard_tanh(const Tensor& x);
/// log(sigmoid(x)) as -softplus(-x), softplus' stable form: -exp(-x) for a large positive x (not
/// 0), x for a large negative one (not log(0) = -inf).
Tensor log_sigmoid(const Tensor& x);
/// x where |x| > threshold, else 0.
Tensor hard_shrink(const Tensor& x, float threshold = 0.5f);
/// x - threshold above threshold, x + threshold below -threshold, else 0 (x - clip(x, -t, t)).
Tensor soft_shrink(const Tensor& x, float threshold = 0.5f);
/// x - tanh(x); for |x| <= 0.5 from its Taylor series (x^3 / 3 - 2 x^5 / 15 + ..., to x^15),
/// where the difference would cancel.
Tensor tanh_shrink(const Tensor& x);
/// (x + sqrt(x^2 + b)) / 2; for x <= 0 as b / (2 (sqrt(x^2 + b) - x)), without the cancellation,
/// and |x| itself for sqrt(x^2 + b) beyond 1e18 (no overflow of x^2).
Tensor squareplus(const Tensor& x, float b = 4.0f);
/// 0 for x <= -1, (x + 1)^2 / 4 for -1 < x < 1, x for x >= 1.
Tensor sparse_plus(const Tensor& x);
/// (clip(x, -1, 1) + 1) / 2.
Tensor sparse_sigmoid(const Tensor& x);
/// Keras' activations.relu(x, negative_slope, max_value, threshold) (its ReLU layer's), as
/// keras/src/activations/activations.py's ReLU.static_call computes it: x for x > threshold (0
/// otherwise, and where threshold != 0 a NaN too), clipped to max_value, minus negative_slope *
/// relu(threshold - x).
Tensor keras_relu(const Tensor& x, float negative_slope, std::optional<float> max_value, float threshold);

}  // namespace lockstep::layers
