#pragma once
// sigmoid, tanh and silu over float arrays, a vector at a time (vec_math.hpp), where the C library's
// expf and tanhf one element a call were a third of an LSTM's training step. One definition,
// compiled without FMA contraction (src/CMakeLists.txt), for every caller: the unary kernels and
// the fused recurrent cells give an element the same bits. The last partial vector is padded, so
// an element's bits do not depend on where a range starts or ends.
#include <cstdint>

namespace lockstep::backend::cpu {

/// y[i] = 1 / (1 + exp(-x[i])), within a few ulp; 0 and 1 at -inf and +inf; NaN stays NaN.
void sigmoid_floats(const float* x, float* y, std::int64_t n);
/// y[i] = tanh(x[i]), within a few ulp (relative, small arguments included; tanh(-0) = -0);
/// +-1 at +-inf; NaN stays NaN.
void tanh_floats(const float* x, float* y, std::int64_t n);
/// y[i] = x[i] * sigmoid(x[i]) (Keras' silu / swish), with sigmoid_floats' sigmoid.
void silu_floats(const float* x, float* y, std::int64_t n);
/// dx[i] = dy[i] * s * (1 + x[i] (1 - s)) with s = sigmoid(x[i]): silu's gradient.
void silu_backward_floats(const float* x, const float* dy, float* dx, std::int64_t n);

}  // namespace lockstep::backend::cpu
