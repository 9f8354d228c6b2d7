#pragma once
// Keras 3's activation functions beyond the ops' own (keras/src/activations/activations.py and
// keras/src/ops/nn.py, the TensorFlow backend's definitions): built from recorded ops, so that
// their gradients, every floating dtype and every backend are the ops'. A float16 or bfloat16
// input is computed in float32 and cast back, as the ops' kernels compute. NaN in is NaN out
// (Keras' ReLU layer with a threshold excepted, whose where() makes it 0, as Keras').
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
/// Keras' activations.relu(x, negative_slope, max_value, threshold) (its ReLU layer's), as
/// keras/src/activations/activations.py's ReLU.static_call computes it: x for x > threshold (0
/// otherwise, and where threshold != 0 a NaN too), clipped to max_value, minus negative_slope *
/// relu(threshold - x).
Tensor keras_relu(const Tensor& x, float negative_slope, std::optional<float> max_value, float threshold);

}  // namespace lockstep::layers
