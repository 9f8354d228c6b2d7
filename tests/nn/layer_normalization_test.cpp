// LayerNormalization: Keras 3's normalisation over the last axis, worked out by hand, its
// configuration (Keras' names and defaults) and its mixed-precision behaviour.
#include "lockstep/layers/layer_normalization.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/layer_registry.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using nlohmann::json;

// Two examples of 4 features: 1, 2, 3, 6 (mean 3, variance 3.5) and 0, 0, 4, 4 (mean 2, variance 4).
Tensor batch() { return Tensor::from_vector<float>({1, 2, 3, 6, 0, 0, 4, 4}, {2, 4}); }

TEST(LayerNormalization, NormalisesEachExampleOverItsFeatures) {
  auto ln = layers::LayerNormalization();
  ln->build(Shape{-1, 4}, 0);
  EXPECT_EQ(ln->count_params(), 8);  // gamma, beta
  ASSERT_EQ(ln->trainable_variables().size(), 2u);
  const auto x = batch().to_vector<float>();
  const double mean[] = {3, 2}, var[] = {3.5, 4};
  for (bool training : {false, true}) {
    const auto y = ln->call(batch(), CallContext{.training = training}).to_vector<float>();
    for (std::size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(y[i], (x[i] - mean[i / 4]) / std::sqrt(var[i / 4] + 1e-3), 1e-5) << i;
  }
}

TEST(LayerNormalization, GammaAndBetaScaleAndShiftEachFeature) {
  auto made = layers::LayerNormalization({.epsilon = 0.5f});
  auto& ln = dynamic_cast<layers::LayerNormalizationLayer&>(*made);
  ln.build(Shape{-1, 2, 4}, 0);
  ln.gamma().assign(Tensor::from_vector<float>({1, 2, 3, 4}, {4}));
  ln.beta().assign(Tensor::from_vector<float>({0, -1, 1, 0.5f}, {4}));
  const Tensor x = reshape(batch(), Shape{1, 2, 4});
  const auto y = ln.call(x, CallContext{}).to_vector<float>();
  const auto xs = batch().to_vector<float>();
  const double mean[] = {3, 2}, var[] = {3.5, 4}, g[] = {1, 2, 3, 4}, b[] = {0, -1, 1, 0.5};
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(y[i], (xs[i] - mean[i / 4]) / std::sqrt(var[i / 4] + 0.5) * g[i % 4] + b[i % 4], 1e-5) << i;

  auto plain = layers::LayerNormalization({.center = false, .scale = false});
  plain->build(Shape{-1, 4}, 0);
  EXPECT_TRUE(plain->variables().empty());
}

TEST(LayerNormalization, MixedPrecisionComputesInFloat32AndReturnsTheComputeDtype) {
  auto ln = layers::LayerNormalization();
  ln->set_dtype_policy(mixed_precision::Policy("mixed_float16"));
  ln->build(Shape{-1, 4}, 0);
  const Tensor y = ln->call(batch(), CallContext{});
  EXPECT_EQ(y.dtype(), DType::kF16);
  EXPECT_EQ(ln->variables()[0].value().dtype(), DType::kF32);
  const auto got = cast(y, DType::kF32).to_vector<float>();
  const auto x = batch().to_vector<float>();
  const double mean[] = {3, 2}, var[] = {3.5, 4};
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(got[i], (x[i] - mean[i / 4]) / std::sqrt(var[i / 4] + 1e-3), 2e-3) << i;
}

// Its gradient (one fused op) under mixed_float16 is float32's, rounded: the input's in the
// input's dtype, gamma's and beta's in their variables' (float32).
TEST(LayerNormalization, MixedPrecisionGradientsAreFloat32sInTheirDtypes) {
  const Tensor dy = Tensor::from_vector<float>({1, -2, 0.5f, 3, -1, 2, 1, 0.25f}, {2, 4});
  std::vector<std::vector<float>> want;
  for (bool mixed : {false, true}) {
    auto made = layers::LayerNormalization();
    if (mixed) made->set_dtype_policy(mixed_precision::Policy("mixed_float16"));
    made->build(Shape{-1, 4}, 0);
    auto& ln = dynamic_cast<layers::LayerNormalizationLayer&>(*made);
    ln.gamma().assign(Tensor::from_vector<float>({1, 2, 3, 4}, {4}));
    const Tensor x = mixed ? cast(batch(), DType::kF16) : batch();
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    const Tensor y = ln.call(x, CallContext{.training = true});
    const Tensor g = mixed ? cast(dy, DType::kF16) : dy;
    const Tensor dx = tape.gradient(y, std::vector<Tensor>{x}, g)[0];
    const auto dvars = tape.gradient(y, std::vector<Variable>{ln.gamma(), ln.beta()}, g);
    ASSERT_EQ(dx.dtype(), x.dtype());
    ASSERT_EQ(dvars[0].dtype(), DType::kF32);
    ASSERT_EQ(dvars[1].dtype(), DType::kF32);
    std::vector<std::vector<float>> got{cast(dx, DType::kF32).to_vector<float>(), dvars[0].to_vector<float>(),
                                        dvars[1].to_vector<float>()};
    if (!mixed) {
      want = got;
      continue;
    }
    for (std::size_t t = 0; t < got.size(); ++t)
      for (std::size_t i = 0; i < got[t].size(); ++i)
        EXPECT_NEAR(got[t][i], want[t][i], 2e-3 * (1 + std::fabs(want[t][i]))) << t << ", " << i;
  }
}

TEST(LayerNormalization, ConfigHasKerasNamesAndDefaultsAndRoundTrips) {
  auto ln = layers::LayerNormalization();
  ln->set_name("ln");
  const json c = ln->get_config();
  EXPECT_EQ(c.at("name"), "ln");
  EXPECT_EQ(c.at("axis"), -1);
  EXPECT_NEAR(c.at("epsilon").get<double>(), 1e-3, 1e-9);
  EXPECT_EQ(c.at("center"), true);
  EXPECT_EQ(c.at("scale"), true);
  EXPECT_EQ(c.at("beta_initializer"), "zeros");
  EXPECT_EQ(c.at("gamma_initializer"), "ones");

  const auto cls = layers::find_layer_class("LayerNormalization");
  ASSERT_TRUE(cls.has_value());
  json edited = c;
  edited["epsilon"] = 0.25;
  edited["center"] = false;
  const auto back = cls->from_config(edited);
  EXPECT_EQ(back->class_name(), "LayerNormalization");
  EXPECT_EQ(back->get_config(), [&] { json e = edited; e["epsilon"] = 0.25f; return e; }());
  edited["axis"] = 1;
  EXPECT_THROW(cls->from_config(edited), ValueError);
}

TEST(LayerNormalization, BadArgumentsAndInputsAreNamed) {
  EXPECT_THROW(layers::LayerNormalization({.epsilon = 0.0f}), ValueError);
  EXPECT_THROW(layers::LayerNormalization({.gamma_initializer = "nope"}), ValueError);
  auto ln = layers::LayerNormalization();
  EXPECT_THROW(ln->build(Shape{-1}, 0), ValueError);
  ln->build(Shape{-1, 4}, 0);
  const std::string m = test::message_of([&] { ln->call(Tensor::zeros(Shape{2, 3}), CallContext{}); });
  EXPECT_NE(m.find("LayerNormalization"), std::string::npos) << m;
}

}  // namespace
}  // namespace lockstep
