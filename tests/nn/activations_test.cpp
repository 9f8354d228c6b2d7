// Keras 3's activations beyond relu / sigmoid / tanh / softmax / gelu / silu (the stable forms where
// the plain formulas cancel or overflow too), and its advanced
// activation layers (ReLU, LeakyReLU, ELU, PReLU): values against the formulas at ordinary, large
// and zero inputs and NaN, gradients against the derivatives (finite at every input), 16-bit
// inputs against float32, and the layers' arguments and configs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/activation_layers.hpp"
#include "lockstep/layers/activations.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/layers/layer_registry.hpp"

namespace lockstep {
namespace {

using layers::CallContext;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus_d(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double hard_sigmoid_d(double x) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }
// x - tanh(x), its series where the double difference would cancel too.
double tanh_shrink_d(double x) {
  if (std::fabs(x) >= 1e-2) return x - std::tanh(x);
  const double z = x * x;
  return x * z * (1.0 / 3 - z * (2.0 / 15 - z * 17.0 / 315));
}
// (x + sqrt(x^2 + 4)) / 2, for x <= 0 without the cancellation.
double squareplus_d(double x) {
  const double s = std::sqrt(x * x + 4);
  return x > 0 ? (x + s) / 2 : 4 / (2 * (s - x));
}
constexpr double kSeluAlpha = 1.67326324, kSeluScale = 1.05070098;

struct Formula {
  const char* name;
  std::function<double(double)> value;
  std::function<double(double)> derivative;
  std::vector<double> kinks;  // where the derivative is one side's
};

// keras/src/activations/activations.py's definitions (the TensorFlow backend's ops).
std::vector<Formula> formulas() {
  return {
      {"elu", [](double x) { return x > 0 ? x : std::expm1(x); }, [](double x) { return x > 0 ? 1.0 : std::exp(x); },
       {}},
      {"selu", [](double x) { return kSeluScale * (x > 0 ? x : kSeluAlpha * std::expm1(x)); },
       [](double x) { return kSeluScale * (x > 0 ? 1.0 : kSeluAlpha * std::exp(x)); }, {0.0}},
      {"leaky_relu", [](double x) { return x > 0 ? x : 0.2 * x; }, [](double x) { return x > 0 ? 1.0 : 0.2; }, {0.0}},
      {"relu6", [](double x) { return std::min(std::max(x, 0.0), 6.0); },
       [](double x) { return x > 0 && x < 6 ? 1.0 : 0.0; }, {0.0, 6.0}},
      {"softplus", softplus_d, sigmoid_d, {}},
      {"softsign", [](double x) { return x / (1 + std::fabs(x)); },
       [](double x) { return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x))); }, {}},
      {"hard_sigmoid", hard_sigmoid_d, [](double x) { return x > -3 && x < 3 ? 1.0 / 6.0 : 0.0; }, {-3.0, 3.0}},
      {"hard_silu", [](double x) { return x * hard_sigmoid_d(x); },
       [](double x) { return hard_sigmoid_d(x) + (x > -3 && x < 3 ? x / 6.0 : 0.0); }, {-3.0, 3.0}},
      {"exponential", [](double x) { return std::exp(x); }, [](double x) { return std::exp(x); }, {}},
      {"mish", [](double x) { return x * std::tanh(softplus_d(x)); },
       [](double x) {
         const double t = std::tanh(softplus_d(x));
         return t + x * (1 - t * t) * sigmoid_d(x);
       },
       {}},
      // The rest of Keras 3's: each written so that a NaN gives NaN, as lockstep's do.
      {"celu", [](double x) { return x > 0 ? x : std::expm1(x); }, [](double x) { return x > 0 ? 1.0 : std::exp(x); },
       {}},
      {"hard_tanh", [](double x) { return std::min(std::max(x, -1.0), 1.0); },
       [](double x) { return std::fabs(x) < 1 ? 1.0 : 0.0; }, {-1.0, 1.0}},
      {"log_sigmoid", [](double x) { return -softplus_d(-x); }, [](double x) { return sigmoid_d(-x); }, {}},
      {"hard_shrink", [](double x) { return std::fabs(x) <= 0.5 ? 0.0 : x; },
       [](double x) { return std::fabs(x) <= 0.5 ? 0.0 : 1.0; }, {-0.5, 0.5}},
      {"soft_shrink", [](double x) { return std::fabs(x) <= 0.5 ? 0.0 : x - std::copysign(0.5, x); },
       [](double x) { return std::fabs(x) <= 0.5 ? 0.0 : 1.0; }, {-0.5, 0.5}},
      {"tanh_shrink", tanh_shrink_d, [](double x) { return std::tanh(x) * std::tanh(x); }, {}},
      {"squareplus", squareplus_d, [](double x) { return 0.5 * (1 + x / std::sqrt(x * x + 4)); }, {}},
      {"sparse_plus", [](double x) { return x <= -1 ? 0.0 : x < 1 ? 0.25 * (x + 1) * (x + 1) : x; },
       [](double x) { return x <= -1 ? 0.0 : x < 1 ? 0.5 * (x + 1) : 1.0; }, {-1.0, 1.0}},
      {"sparse_sigmoid", [](double x) { return x <= -1 ? 0.0 : x >= 1 ? 1.0 : 0.5 * (x + 1); },
       [](double x) { return std::fabs(x) < 1 ? 0.5 : 0.0; }, {-1.0, 1.0}},
  };
}

const std::vector<double> kPoints = {-1000, -100, -30, -20, -5, -3, -2.5, -1, -0.5, -1e-3, -1e-6, 0,
                                     1e-6,  1e-3, 0.5, 1,   2.5, 3,  5,    20, 30, 100,  1000};

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

Tensor points(const std::vector<double>& xs) {
  std::vector<float> v(xs.begin(), xs.end());
  return Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())});
}

TEST(Activations, ValuesMatchKerasFormulasAtLargeZeroAndNaNInputs) {
  std::vector<double> xs = kPoints;
  xs.push_back(kNaN);
  for (const Formula& f : formulas()) {
    const auto kind = layers::parse_activation(f.name);
    EXPECT_EQ(layers::activation_name(kind), f.name);
    const auto y = layers::apply_activation(kind, points(xs)).to_vector<float>();
    for (std::size_t i = 0; i < xs.size(); ++i) {
      // The reference in float32 (exp(100) overflows there as in Keras' float32).
      const double want = static_cast<float>(f.value(static_cast<float>(xs[i])));
      EXPECT_TRUE(close(y[i], want, 2e-6, 1e-37)) << f.name << "(" << xs[i] << ") = " << y[i] << ", want " << want;
    }
  }
  // Keras' aliases, and the names a config carries.
  EXPECT_EQ(layers::activation_name(layers::parse_activation("hard_swish")), "hard_silu");
  EXPECT_VALUE_ERROR((void)layers::parse_activation("sparse_max"), "sparse_sigmoid");
  // Keras 3's names lockstep refuses, each saying why.
  EXPECT_VALUE_ERROR((void)layers::parse_activation("glu"), "halves the last axis");
  EXPECT_VALUE_ERROR((void)layers::parse_activation("sparsemax"), "activation 'sparsemax' is not supported");
  EXPECT_VALUE_ERROR((void)layers::parse_activation("threshold"), "ReLU(threshold=...)");
}

// Where the stable forms differ from the plain formulas in float32: squareplus for a large negative
// x (Keras' (x + sqrt(x^2 + 4)) / 2 cancels to 0 or a few ulps of |x|), tanh_shrink near 0, log_sigmoid
// for a large positive x, and infinities.
TEST(Activations, StableFormsKeepTheirDigitsWhereThePlainFormulasCancel) {
  const auto at = [](const char* name, std::vector<double> xs) {
    return layers::apply_activation(layers::parse_activation(name), points(xs)).to_vector<float>();
  };
  const auto sq = at("squareplus", {-1e4, -1e8, -1e30, 1e30, -std::numeric_limits<double>::infinity(),
                                    std::numeric_limits<double>::infinity()});
  EXPECT_NEAR(sq[0], 1e-4, 1e-4 * 1e-6);  // 4 / (2 (1e4 + 1e4))
  EXPECT_NEAR(sq[1], 1e-8, 1e-8 * 1e-6);
  EXPECT_NEAR(sq[2], 1e-30, 1e-30 * 1e-6);  // x^2 beyond float32: |x| stands for sqrt(x^2 + 4)
  EXPECT_FLOAT_EQ(sq[3], 1e30f);
  EXPECT_EQ(sq[4], 0.0f);
  EXPECT_EQ(sq[5], std::numeric_limits<float>::infinity());
  const auto ts = at("tanh_shrink", {1e-3, -1e-2, 0.3});
  EXPECT_NEAR(ts[0], tanh_shrink_d(1e-3), 1e-9 / 3 * 1e-6);  // about 1e-9 / 3
  EXPECT_NEAR(ts[1], tanh_shrink_d(-1e-2), 1e-6 * tanh_shrink_d(1e-2));  // odd: -3.3e-7
  EXPECT_NEAR(ts[2], tanh_shrink_d(0.3), 1e-6 * tanh_shrink_d(0.3));
  const auto ls = at("log_sigmoid", {50, -50});
  EXPECT_NEAR(ls[0], -std::exp(-50.0), std::exp(-50.0) * 1e-6);
  EXPECT_FLOAT_EQ(ls[1], -50.0f);
}

TEST(Activations, GradientsMatchDerivativesAndStayFiniteForLargeInputs) {
  for (const Formula& f : formulas()) {
    const auto kind = layers::parse_activation(f.name);
    Variable x(points(kPoints));
    GradientTape tape;
    const Tensor y = layers::apply_activation(kind, x.value());
    const auto g = tape.gradient(sum(y), std::vector<Variable>{x})[0].to_vector<float>();
    for (std::size_t i = 0; i < kPoints.size(); ++i) {
      const double at = kPoints[i];
      const double want = static_cast<float>(f.derivative(static_cast<float>(at)));
      if (std::isinf(want)) continue;  // exponential's overflow
      EXPECT_FALSE(std::isnan(g[i])) << f.name << "'(" << at << ") is NaN";
      bool kink = false;
      for (double k : f.kinks) kink = kink || at == k;
      if (kink) continue;
      // 1e-8 absolute: elu'(-20) is 0 here and in TensorFlow ((y + 1) * dy with y = expm1(x) rounded
      // to -1); 1e-4 relative: softsign's gradient from the quotient rule cancels at large |x|.
      EXPECT_TRUE(close(g[i], want, 1e-4, 1e-8)) << f.name << "'(" << at << ") = " << g[i] << ", want " << want;
    }
  }
}

TEST(Activations, SixteenBitInputsComputeInFloat32AndMatchIt) {
  std::vector<double> xs;
  for (int i = -40; i <= 40; ++i) xs.push_back(i * 0.17);
  const Tensor x = points(xs);
  for (const Formula& f : formulas()) {
    const auto kind = layers::parse_activation(f.name);
    const auto full = layers::apply_activation(kind, x).to_vector<float>();
    for (DType d : {DType::kF16, DType::kBF16}) {
      const Tensor y = layers::apply_activation(kind, x.to(d));
      ASSERT_EQ(y.dtype(), d) << f.name;
      const auto got = y.to(DType::kF32).to_vector<float>();
      // The input's own rounding (1/2048, 1/256 relative) moves the result by about that.
      const double tol = d == DType::kBF16 ? 2e-2 : 3e-3;
      for (std::size_t i = 0; i < xs.size(); ++i)
        EXPECT_NEAR(got[i], full[i], tol * (1 + std::fabs(full[i]))) << f.name << " " << dtype_name(d) << " at "
                                                                    << xs[i];
      // NaN stays NaN in 16 bits too.
      const Tensor nan = layers::apply_activation(kind, points({kNaN}).to(d));
      EXPECT_TRUE(std::isnan(nan.to(DType::kF32).to_vector<float>()[0])) << f.name << " " << dtype_name(d);
    }
  }
}

// ---- layers ----

std::vector<float> run(const layers::LayerPtr& layer, const std::vector<double>& xs) {
  layer->build(Shape{-1, static_cast<std::int64_t>(xs.size())}, 1);
  return layer->call(points(xs).reshape(Shape{1, static_cast<std::int64_t>(xs.size())}), CallContext{})
      .to_vector<float>();
}

TEST(ActivationLayers, ReluArgumentsFollowKerasStaticCall) {
  const std::vector<double> xs = {-4, -1, -0.25, 0, 0.25, 0.5, 1, 3, 7};
  // keras.layers.ReLU(...)(xs), worked out from activations.py's ReLU.static_call.
  EXPECT_EQ(run(layers::ReLU(), xs), (std::vector<float>{0, 0, 0, 0, 0.25, 0.5, 1, 3, 7}));
  EXPECT_EQ(run(layers::ReLU(6.0f), xs), (std::vector<float>{0, 0, 0, 0, 0.25, 0.5, 1, 3, 6}));
  EXPECT_EQ(run(layers::ReLU(std::nullopt, 0.5f), xs), (std::vector<float>{-2, -0.5, -0.125, 0, 0.25, 0.5, 1, 3, 7}));
  // threshold: x above it, else 0, minus negative_slope * relu(threshold - x).
  EXPECT_EQ(run(layers::ReLU(std::nullopt, 0.0f, 0.5f), xs), (std::vector<float>{0, 0, 0, 0, 0, 0, 1, 3, 7}));
  EXPECT_EQ(run(layers::ReLU(2.0f, 0.5f, 0.5f), xs),
            (std::vector<float>{-2.25, -0.75, -0.375, -0.25, -0.125, 0, 1, 2, 2}));
  EXPECT_VALUE_ERROR((void)layers::ReLU(-1.0f), "max_value");
  EXPECT_VALUE_ERROR((void)layers::ReLU(std::nullopt, -0.1f), "negative_slope");
  EXPECT_VALUE_ERROR((void)layers::ReLU(std::nullopt, 0.0f, -1.0f), "threshold");
  EXPECT_VALUE_ERROR((void)layers::LeakyReLU(-0.5f), "negative_slope");
}

TEST(ActivationLayers, LeakyReluLayerDefaultIsKerasLayersNotTheFunctions) {
  EXPECT_EQ(run(layers::LeakyReLU(), {-2, 3}), (std::vector<float>{-0.6f, 3}));  // 0.3
  EXPECT_EQ(run(layers::Activation("leaky_relu"), {-2, 3}), (std::vector<float>{-0.4f, 3}));  // 0.2
  const auto elu = run(layers::ELU(0.5f), {-2, 3});
  EXPECT_NEAR(elu[0], 0.5 * std::expm1(-2.0), 1e-7);
  EXPECT_EQ(elu[1], 3.0f);
}

TEST(ActivationLayers, PreluAlphaHasSharedAxesOfOneAndBroadcasts) {
  auto p = layers::PReLU("zeros", {1, 2});
  p->build(Shape{-1, 3, 4, 2}, 0);
  auto* prelu = dynamic_cast<layers::PReLULayer*>(p.get());
  ASSERT_NE(prelu, nullptr);
  EXPECT_EQ(prelu->alpha().shape(), (Shape{1, 1, 2}));
  EXPECT_TRUE(prelu->alpha().name().ends_with("/alpha")) << prelu->alpha().name();
  auto unshared = layers::PReLU();
  unshared->build(Shape{-1, 3, 4}, 0);
  EXPECT_EQ(unshared->trainable_variables()[0].shape(), (Shape{3, 4}));
  // relu(x) - alpha * relu(-x), alpha per channel.
  prelu->alpha().assign(Tensor::from_vector<float>({0.5f, 2.0f}, {1, 1, 2}));
  std::vector<float> x(24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 4 < 2 ? -1.0f : 1.0f) * static_cast<float>(i + 1);
  const auto y = p->call(Tensor::from_vector(x, {1, 3, 4, 2}), CallContext{}).to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(y[i], x[i] > 0 ? x[i] : x[i] * (i % 2 == 0 ? 0.5f : 2.0f)) << i;
  EXPECT_VALUE_ERROR((void)layers::PReLU("zeros", {0}), "shared_axes");
  auto bad = layers::PReLU("zeros", {3});
  EXPECT_VALUE_ERROR((void)bad->build(Shape{-1, 3, 4}, 0), "shared axis 3");
}

TEST(ActivationLayers, PreluAlphaTrains) {
  auto p = layers::PReLU();
  p->build(Shape{-1, 3}, 0);
  Variable alpha = p->trainable_variables()[0];
  const Tensor x = Tensor::from_vector<float>({-1, -2, 3, -4, 5, -6}, {2, 3});
  // d sum(y) / d alpha = -relu(-x) summed over the batch.
  GradientTape tape;
  const auto g = tape.gradient(sum(p->call(x, CallContext{})), std::vector<Variable>{alpha})[0].to_vector<float>();
  EXPECT_EQ(g, (std::vector<float>{-5, -2, -6}));
  alpha.assign(sub(alpha.value(), scale(Tensor::from_vector(g, {3}), 0.1f)));
  EXPECT_EQ(p->call(x, CallContext{}).to_vector<float>()[0], -0.5f);  // alpha 0.5 now
}

TEST(ActivationLayers, UnderAMixedPolicyOutputsAreSixteenBitAndAlphaStaysFloat32) {
  const std::vector<double> xs = {-3, -0.5, 0.25, 2};
  std::vector<std::function<layers::LayerPtr()>> makes = {
      [] { return layers::ReLU(1.0f, 0.2f, 0.1f); }, [] { return layers::LeakyReLU(); },
      [] { return layers::ELU(0.5f); }, [] { return layers::PReLU("uniform"); }};
  for (const char* policy : {"mixed_float16", "mixed_bfloat16"}) {
    for (const auto& make : makes) {
      mixed_precision::set_global_policy(policy);
      auto mixed = make();
      mixed_precision::set_global_policy("float32");
      auto full = make();
      const Tensor x = points(xs).reshape(Shape{1, 4});
      mixed->build(Shape{-1, 4}, 3);
      full->build(Shape{-1, 4}, 3);
      GradientTape tape;
      const Tensor y = mixed->call(x, CallContext{});
      EXPECT_NE(y.dtype(), DType::kF32) << mixed->class_name() << " under " << policy;
      const auto got = y.to(DType::kF32).to_vector<float>(), want = full->call(x, CallContext{}).to_vector<float>();
      for (std::size_t i = 0; i < xs.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-2 * (1 + std::fabs(want[i]))) << mixed->class_name() << " under " << policy;
      if (mixed->trainable_variables().empty()) continue;
      const Variable alpha = mixed->trainable_variables()[0];
      EXPECT_EQ(alpha.value().dtype(), DType::kF32);
      const Tensor g = tape.gradient(sum(cast(y, DType::kF32)), std::vector<Variable>{alpha})[0];
      ASSERT_TRUE(g.defined());
      EXPECT_EQ(g.dtype(), DType::kF32);
    }
  }
  mixed_precision::set_global_policy("float32");
}

TEST(ActivationLayers, ConfigsRoundTripThroughTheRegistry) {
  const std::vector<layers::LayerPtr> made = {
      layers::ReLU(4.0f, 0.1f, 0.5f), layers::ReLU(), layers::LeakyReLU(0.05f), layers::ELU(0.7f),
      layers::PReLU("ones", {1}), layers::Activation("mish"), layers::Activation("hard_swish")};
  for (const auto& layer : made) {
    const nlohmann::json c = layer->get_config();
    const auto cls = layers::find_layer_class(layer->class_name());
    ASSERT_TRUE(cls) << layer->class_name();
    const auto back = cls->from_config(c);
    EXPECT_EQ(back->get_config(), c) << layer->class_name();
  }
  EXPECT_EQ(layers::ReLU()->get_config().at("max_value"), nullptr);
  EXPECT_EQ(layers::PReLU()->get_config().at("shared_axes"), nullptr);
  // Keras' files: one shared axis as an int, ELU without alpha (Keras' get_config leaves it out).
  const auto one_axis = layers::PReLULayer::from_config({{"name", "p"}, {"shared_axes", 2}});
  EXPECT_EQ(one_axis->get_config().at("shared_axes"), nlohmann::json::array({2}));
  EXPECT_EQ(layers::ELULayer::from_config({{"name", "e"}})->get_config().at("alpha"), 1.0);
  EXPECT_EQ(layers::LeakyReLULayer::from_config({{"name", "l"}})->get_config().at("negative_slope"), 0.3f);
}

}  // namespace
}  // namespace lockstep
