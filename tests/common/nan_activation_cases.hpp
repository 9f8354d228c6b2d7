#pragma once
// NaN through the activations, on whatever device is current (the CPU's tests, and gpu_tests on
// every GPU): TensorFlow's rule, a NaN in gives a NaN out. Where a ReLU turned a NaN into 0, a
// model whose weights became NaN still gave a finite loss (the next layer's bias), so
// TerminateOnNaN, which lockstep train installs, never stopped it: it trained on with NaN weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"

namespace lockstep::test {

/// The activations and clip at NaN, +-inf and +-0 on the current device, against the rule each
/// value follows (in double: every dtype's outputs of these inputs are exact). gelu and silu at
/// -inf are -inf * 0, NaN, as TensorFlow's formulas give; softmax of a row holding a NaN or +inf
/// is a row of NaN (x - max(x) is NaN there), as TensorFlow's.
inline void expect_activations_keep_nan(const std::string& where) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> xs{kNan, kInf, -kInf, 0.0f, -0.0f, 1.5f, -2.25f, kNan};
  struct Case {
    const char* name;
    Tensor (*f)(const Tensor&);
    std::vector<double> want;  // for xs; NaN: NaN
  };
  constexpr double N = std::numeric_limits<double>::quiet_NaN(), I = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {"relu", [](const Tensor& x) { return relu(x); }, {N, I, 0, 0, 0, 1.5, 0, N}},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, {N, 1, 0, 0.5, 0.5, -1, -1, N}},
      {"tanh", [](const Tensor& x) { return tanh(x); }, {N, 1, -1, 0, 0, -1, -1, N}},
      {"gelu", [](const Tensor& x) { return gelu(x); }, {N, I, N, 0, 0, -1, -1, N}},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, true); }, {N, I, N, 0, 0, -1, -1, N}},
      {"silu", [](const Tensor& x) { return silu(x); }, {N, I, N, 0, 0, -1, -1, N}},
      {"clip", [](const Tensor& x) { return clip(x, -0.5f, 0.75f); }, {N, 0.75, -0.5, 0, 0, 0.75, -0.5, N}},
      // Keras 3's others (layers/activations.hpp), from these ops; +-inf as TensorFlow's formulas give.
      {"elu", [](const Tensor& x) { return layers::elu(x); }, {N, I, -1, 0, 0, 1.5, -1, N}},
      {"selu", [](const Tensor& x) { return layers::selu(x); }, {N, I, -1, 0, 0, -1, -1, N}},
      {"leaky_relu", [](const Tensor& x) { return layers::leaky_relu(x); }, {N, I, -I, 0, 0, 1.5, -1, N}},
      {"relu6", [](const Tensor& x) { return layers::relu6(x); }, {N, 6, 0, 0, 0, 1.5, 0, N}},
      {"softplus", [](const Tensor& x) { return layers::softplus(x); }, {N, I, 0, -1, -1, -1, -1, N}},
      {"softsign", [](const Tensor& x) { return layers::softsign(x); }, {N, N, N, 0, 0, -1, -1, N}},
      {"hard_sigmoid", [](const Tensor& x) { return layers::hard_sigmoid(x); }, {N, 1, 0, -1, -1, -1, -1, N}},
      {"hard_silu", [](const Tensor& x) { return layers::hard_silu(x); }, {N, I, N, 0, 0, -1, -1, N}},
      {"exponential", [](const Tensor& x) { return exp(x); }, {N, I, 0, 1, 1, -1, -1, N}},
      {"mish", [](const Tensor& x) { return layers::mish(x); }, {N, I, N, 0, 0, -1, -1, N}},
  };
  for (const DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const Tensor x = Tensor::from_vector(xs, {8}).to(dt);
    for (const Case& c : cases) {
      const std::vector<float> got = c.f(x).to(DType::kF32).to(Device{}).to_vector<float>();
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const std::string what = where + " " + c.name + "(" + std::to_string(xs[i]) + ") " + dtype_name(dt);
        if (c.want[i] == -1) {  // an ordinary value: finite
          EXPECT_TRUE(std::isfinite(got[i])) << what << " = " << got[i];
        } else if (std::isnan(c.want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << what << " = " << got[i] << ", expected NaN";
        } else {
          EXPECT_EQ(got[i], c.want[i]) << what;
        }
      }
    }
  }
  // Dense's ReLU in its product (gemm_bias_activation: CUDA's epilogue adds the bias, a kernel the
  // ReLU), with and without a bias: a row of x holding a NaN is a row of NaN.
  const Tensor x = Tensor::from_vector(std::vector<float>{1, -2, kNan, 3, -kInf, 1}, {3, 2});
  const Tensor w = Tensor::from_vector(std::vector<float>{1, -1, 0.5f, 2}, {2, 2});
  for (const bool with_bias : {false, true}) {
    const Tensor b = with_bias ? Tensor::from_vector(std::vector<float>{0.25f, -0.25f}, {2}) : Tensor();
    const std::vector<float> y = dense(x, w, b, FusedActivation::kRelu).to(Device{}).to_vector<float>();
    const std::string what = where + " dense relu" + (with_bias ? " with a bias" : "");
    EXPECT_EQ(y[0], 0.0f + (with_bias ? 0.25f : 0.0f)) << what;  // 1 - 1: 0, then the bias
    EXPECT_TRUE(std::isnan(y[2]) && std::isnan(y[3])) << what << ": " << y[2] << ", " << y[3];
    EXPECT_EQ(y[4], 0.0f) << what;  // -inf * 1 + 1 * 0.5: -inf, relu 0
    EXPECT_EQ(y[5], kInf) << what;  // -inf * -1 + 1 * 2: inf
  }
  // Conv2D's fused ReLU (the CPU's pass after oneDNN, whose eltwise_relu post-op gave 0 for a
  // NaN; CUDA's bias_activation after cuDNN): a 1x1 convolution by 1 over [NaN, -inf, inf, -1].
  const Tensor px = Tensor::from_vector(std::vector<float>{kNan, -kInf, kInf, -1}, {1, 1, 4, 1});
  for (const bool with_bias : {false, true}) {
    const Tensor b = with_bias ? Tensor::from_vector(std::vector<float>{0.5f}, {1}) : Tensor();
    const std::vector<float> y = conv2d(px, Tensor::ones({1, 1, 1, 1}), b, {.activation = FusedActivation::kRelu})
                                     .to(Device{})
                                     .to_vector<float>();
    const std::string what = where + " conv2d relu" + (with_bias ? " with a bias" : "");
    EXPECT_TRUE(std::isnan(y[0])) << what << ": " << y[0];
    EXPECT_EQ(y[1], 0.0f) << what;
    EXPECT_EQ(y[2], kInf) << what;
    EXPECT_EQ(y[3], 0.0f) << what;
  }
  // Max pooling: a window holding a NaN is NaN wherever the NaN is; a window of -inf is -inf.
  const Tensor pooled = max_pool2d(
      Tensor::from_vector(std::vector<float>{kNan, 1, 5, 1, -kInf, -kInf, 1, 2, 1, kNan, -kInf, -kInf}, {1, 2, 6, 1}));
  const std::vector<float> pv = pooled.to(Device{}).to_vector<float>();
  EXPECT_TRUE(std::isnan(pv[0]) && std::isnan(pv[1])) << where << " max_pool2d: " << pv[0] << ", " << pv[1];
  EXPECT_EQ(pv[2], -kInf) << where << " max_pool2d";
  // Its gradient: a window whose maximum is NaN sends it to its first NaN, the element that gave
  // the output, as any window to its first maximum (it went to no element, where the fused
  // conv2d_max_pool2d sent it to the NaN). Windows: a NaN second; a NaN last after a larger value;
  // -inf only; two NaNs after finite values.
  const Tensor wx = Tensor::from_vector(
      std::vector<float>{1, kNan, 5, 1, -kInf, -kInf, 3, 2, 4, 2, 1, kNan, -kInf, -kInf, kNan, kNan}, {1, 2, 8, 1});
  const Tensor pdy = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 4, 1});
  GradientTape tape;
  tape.watch(wx);
  const Tensor pdx = tape.gradient(max_pool2d(wx), std::vector<Tensor>{wx}, pdy)[0];
  EXPECT_EQ(pdx.to(Device{}).to_vector<float>(), (std::vector<float>{0, 1, 0, 0, 3, 0, 0, 0, 0, 0, 0, 2, 0, 0, 4, 0}))
      << where << " max_pool2d's gradient";
  // maximum / minimum: NaN from either side (numpy's and TensorFlow's maximum).
  const Tensor a = Tensor::from_vector(std::vector<float>{kNan, 1, 2}, {3});
  const Tensor c = Tensor::from_vector(std::vector<float>{1, kNan, -kInf}, {3});
  for (const auto& [name, got] : {std::pair{"maximum", maximum(a, c)}, std::pair{"minimum", minimum(a, c)}}) {
    const std::vector<float> v = got.to(Device{}).to_vector<float>();
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1])) << where << " " << name << ": " << v[0] << ", " << v[1];
  }
  // softmax and log_softmax: a row with a NaN or +inf is NaN, -inf is a probability 0.
  const Tensor rows = Tensor::from_vector(std::vector<float>{kNan, 1, 2, kInf, 1, 2, -kInf, 1, 1}, {3, 3});
  for (const bool log : {false, true}) {
    const std::vector<float> v = (log ? log_softmax(rows) : softmax(rows)).to(Device{}).to_vector<float>();
    const std::string what = where + (log ? " log_softmax" : " softmax");
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(v[static_cast<std::size_t>(i)])) << what << " element " << i;
    EXPECT_EQ(v[6], log ? -kInf : 0.0f) << what;
    EXPECT_FLOAT_EQ(v[7], log ? std::log(0.5f) : 0.5f) << what;
  }
}

/// Where the ReLU after a NaN is: an Activation layer (the unary kernel) or Dense's own activation
/// (its product's ReLU: gemm_bias_activation).
enum class ReluAt { kActivationLayer, kDense };

/// fit (with the strategy in scope, if any) of a model whose first Dense kernel is all NaN and a
/// ReLU after it, under TerminateOnNaN reading every step: the batch it stopped at (-1: never),
/// and the steps run.
struct NanFit {
  std::int64_t stopped_at = -1, steps = 0;
};
inline NanFit fit_with_nan_weights(ReluAt relu) {
  const Classification d = random_classification(64, 6, 3, 11);
  set_random_seed(5);
  std::vector<layers::LayerPtr> stack;
  if (relu == ReluAt::kActivationLayer)
    stack = {layers::Dense(8, "linear", 6), layers::Activation("relu"), layers::Dense(3, "softmax")};
  else
    stack = {layers::Dense(8, "relu", 6), layers::Dense(3, "softmax")};
  auto m = std::make_unique<Sequential>(stack);
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const std::vector<Variable> vars = m->variables();
  EXPECT_FALSE(vars.empty());
  if (vars.empty()) return {};
  vars[0].assign(Tensor::full(vars[0].shape(), std::numeric_limits<double>::quiet_NaN()));
  auto guard = std::make_shared<TerminateOnNaN>();
  FitOptions o{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0, .defer_reads = false};
  o.callbacks = {guard};
  m->fit(d.x, d.y, o);
  return {guard->terminated() ? guard->batch() : -1, m->optimizer()->iterations()};
}

}  // namespace lockstep::test
