// Optimizers against Keras' update rules, computed by hand in double precision here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "lockstep/optimizers/optimizer.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {

using optimizers::OptimizerPtr;

Tensor vec(const std::vector<float>& v) { return Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())}); }

Variable var(const std::vector<float>& v, const std::string& name = "w") { return Variable(vec(v), name); }

std::vector<float> values(const Variable& v) { return v.value().to_vector<float>(); }

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// Gradients fed at each of three steps, for a two-element variable.
const std::vector<std::vector<float>> kGrads = {{0.5f, -1.0f}, {-0.25f, 2.0f}, {1.5f, 0.125f}};
const std::vector<float> kW0 = {1.0f, -2.0f};

void run_steps(const OptimizerPtr& opt, const Variable& w, std::size_t steps) {
  for (std::size_t s = 0; s < steps; ++s) opt->apply_gradients({{vec(kGrads[s]), w}});
}

TEST(SGD, PlainStepIsWMinusLrTimesGrad) {
  const double lr = 0.1;
  auto opt = optimizers::SGD(lr);
  Variable w = var(kW0);
  std::vector<double> want(kW0.begin(), kW0.end());
  for (std::size_t s = 0; s < 3; ++s) {
    opt->apply_gradients({{vec(kGrads[s]), w}});
    for (std::size_t i = 0; i < 2; ++i) want[i] -= lr * kGrads[s][i];
    expect_near_all(values(w), want, 1e-6);
  }
  EXPECT_EQ(opt->iterations(), 3);
}

TEST(SGD, DefaultLearningRateIsKeras001) {
  auto opt = optimizers::SGD();
  EXPECT_DOUBLE_EQ(opt->current_learning_rate(), 0.01);
  EXPECT_DOUBLE_EQ(optimizers::Adam()->current_learning_rate(), 0.001);
}

TEST(SGD, MomentumFollowsKerasRule) {
  const double lr = 0.1, mu = 0.9;
  auto opt = optimizers::SGD(lr, mu);
  Variable w = var(kW0);
  std::vector<double> want(kW0.begin(), kW0.end()), m(2, 0.0);
  for (std::size_t s = 0; s < 3; ++s) {
    opt->apply_gradients({{vec(kGrads[s]), w}});
    for (std::size_t i = 0; i < 2; ++i) {
      m[i] = mu * m[i] - lr * kGrads[s][i];
      want[i] += m[i];
    }
    expect_near_all(values(w), want, 1e-6);
  }
}

TEST(SGD, NesterovFollowsKerasRule) {
  const double lr = 0.1, mu = 0.9;
  auto opt = optimizers::SGD(lr, mu, /*nesterov=*/true);
  Variable w = var(kW0);
  std::vector<double> want(kW0.begin(), kW0.end()), m(2, 0.0);
  for (std::size_t s = 0; s < 3; ++s) {
    opt->apply_gradients({{vec(kGrads[s]), w}});
    for (std::size_t i = 0; i < 2; ++i) {
      m[i] = mu * m[i] - lr * kGrads[s][i];
      want[i] += mu * m[i] - lr * kGrads[s][i];
    }
    expect_near_all(values(w), want, 1e-6);
  }
  // Nesterov and plain momentum must differ after the first step.
  auto plain = optimizers::SGD(lr, mu);
  Variable w2 = var(kW0);
  run_steps(plain, w2, 3);
  EXPECT_GT(std::fabs(values(w2)[0] - values(w)[0]), 1e-3);
}

// Keras' Adam: alpha = lr sqrt(1-b2^t)/(1-b1^t); m += (g-m)(1-b1); v += (g^2-v)(1-b2);
// w -= alpha m / (sqrt(v) + eps). AdamW first applies w -= w * wd * lr.
std::vector<double> adam_reference(double lr, double b1, double b2, double eps, double wd, std::size_t steps) {
  std::vector<double> w(kW0.begin(), kW0.end()), m(2, 0.0), v(2, 0.0);
  for (std::size_t s = 0; s < steps; ++s) {
    const double t = static_cast<double>(s + 1);
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (std::size_t i = 0; i < 2; ++i) {
      const double g = kGrads[s][i];
      w[i] -= w[i] * wd * lr;
      m[i] += (g - m[i]) * (1 - b1);
      v[i] += (g * g - v[i]) * (1 - b2);
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
  }
  return w;
}

TEST(Adam, ThreeStepsMatchKerasFormulas) {
  auto opt = optimizers::Adam(0.1);
  Variable w = var(kW0);
  for (std::size_t s = 1; s <= 3; ++s) {
    opt->apply_gradients({{vec(kGrads[s - 1]), w}});
    expect_near_all(values(w), adam_reference(0.1, 0.9, 0.999, 1e-7, 0.0, s), 2e-5);
  }
  // The first Adam step moves each weight by about lr * sign(g) (bias correction).
  Variable w1 = var(kW0);
  optimizers::Adam(0.1)->apply_gradients({{vec(kGrads[0]), w1}});
  EXPECT_NEAR(values(w1)[0], kW0[0] - 0.1, 1e-4);
  EXPECT_NEAR(values(w1)[1], kW0[1] + 0.1, 1e-4);
}

TEST(Adam, CustomBetasAndEpsilon) {
  optimizers::AdamOptions o;
  o.learning_rate = 0.05;
  o.beta_1 = 0.5;
  o.beta_2 = 0.75;
  o.epsilon = 0.1;
  auto opt = optimizers::Adam(o);
  Variable w = var(kW0);
  run_steps(opt, w, 3);
  expect_near_all(values(w), adam_reference(0.05, 0.5, 0.75, 0.1, 0.0, 3), 2e-5);
}

// A moment whose gradient stops decays geometrically; below float32's smallest normal number it
// is flushed to zero instead of going subnormal (every operation on a subnormal can cost a
// microcode assist: Adam ran several times slower per element on MNIST's rarely lit pixels).
TEST(Adam, AMomentDecayingBelowTheSmallestNormalFloatIsFlushedToZero) {
  auto opt = optimizers::Adam(0.1);
  Variable w = var({1.0f});
  opt->apply_gradients({{vec({1e-30f}), w}});  // m = 1e-31: normal
  const auto m = [&] { return opt->slots(w)[0].second.to_vector<float>()[0]; };
  ASSERT_GT(m(), 0.0f);
  // 0.9^190 * 1e-31 ~ 2e-40 would be subnormal; 0.9^160 * 1e-31 ~ 5e-39 already is.
  for (int s = 0; s < 190; ++s) opt->apply_gradients({{vec({0.0f}), w}});
  EXPECT_EQ(m(), 0.0f);
  EXPECT_TRUE(std::isfinite(values(w)[0]));
}

TEST(SGD, AMomentumDecayingBelowTheSmallestNormalFloatIsFlushedToZero) {
  auto opt = optimizers::SGD(1.0, 0.5);
  Variable w = var({1.0f});
  opt->apply_gradients({{vec({1e-30f}), w}});  // momentum -1e-30: normal
  const auto m = [&] { return opt->slots(w)[0].second.to_vector<float>()[0]; };
  ASSERT_LT(m(), 0.0f);
  for (int s = 0; s < 40; ++s) opt->apply_gradients({{vec({0.0f}), w}});  // 0.5^40 * 1e-30 ~ 9e-43
  EXPECT_EQ(m(), 0.0f);
}

TEST(AdamW, DecaysWeightsBeforeTheAdamStep) {
  const double lr = 0.1, wd = 0.5;
  auto opt = optimizers::AdamW(lr, wd);
  EXPECT_EQ(opt->name(), "AdamW");
  Variable w = var(kW0);
  run_steps(opt, w, 3);
  expect_near_all(values(w), adam_reference(lr, 0.9, 0.999, 1e-7, wd, 3), 2e-5);
  // Weight decay must matter: plain Adam ends elsewhere.
  const auto no_decay = adam_reference(lr, 0.9, 0.999, 1e-7, 0.0, 3);
  EXPECT_GT(std::fabs(values(w)[1] - no_decay[1]), 0.05);
}

TEST(Clipping, ClipnormScalesEachVariableToTheNorm) {
  optimizers::SGDOptions o;
  o.learning_rate = 1.0;
  o.clipnorm = 1.0;
  auto opt = optimizers::SGD(o);
  Variable a = var({0.0f, 0.0f}, "a"), b = var({0.0f, 0.0f}, "b");
  // |(3, 4)| = 5 > 1: scaled to (0.6, 0.8); |(0.3, 0.4)| = 0.5 <= 1: unchanged.
  opt->apply_gradients({{vec({3.0f, 4.0f}), a}, {vec({0.3f, 0.4f}), b}});
  expect_near_all(values(a), {-0.6, -0.8}, 1e-6);
  expect_near_all(values(b), {-0.3, -0.4}, 1e-6);
}

TEST(Clipping, GlobalClipnormUsesTheNormOfAllGradients) {
  optimizers::SGDOptions o;
  o.learning_rate = 1.0;
  o.global_clipnorm = 1.0;
  auto opt = optimizers::SGD(o);
  Variable a = var({0.0f, 0.0f}, "a"), b = var({0.0f}, "b");
  // Global norm of (3, 4) and (12) is 13: every gradient is scaled by 1/13.
  opt->apply_gradients({{vec({3.0f, 4.0f}), a}, {vec({12.0f}), b}});
  expect_near_all(values(a), {-3.0 / 13, -4.0 / 13}, 1e-6);
  expect_near_all(values(b), {-12.0 / 13}, 1e-6);
  // Just above the limit (global norm sqrt(1.81)) is scaled too; each variable alone is below it.
  Variable c = var({0.0f, 0.0f}, "c"), d = var({0.0f}, "d");
  const double norm = std::sqrt(0.36 + 0.64 + 0.81);
  opt->apply_gradients({{vec({0.6f, 0.8f}), c}, {vec({0.9f}), d}});
  expect_near_all(values(c), {-0.6 / norm, -0.8 / norm}, 1e-6);
  expect_near_all(values(d), {-0.9 / norm}, 1e-6);
}

// The norms are summed and applied on the device (nothing read back): the bits of the formula
// computed on the host from sum_squares, in double, the factor rounded once to float32.
TEST(Clipping, TheNormsOnTheDeviceGiveTheBitsOfTheHostsFormula) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> ga(1000), gb(37);
  for (float& x : ga) x = u(rng);
  for (float& x : gb) x = u(rng);
  optimizers::SGDOptions o;
  o.learning_rate = 1.0;
  o.clipnorm = 9.0;          // a's norm is about 18: clipped; b's about 3.5: not
  o.global_clipnorm = 15.0;  // about 18.6 in all: clipped
  o.clipvalue = 0.4;
  auto opt = optimizers::SGD(o);
  Variable a = var(std::vector<float>(ga.size(), 0.0f), "a"), b = var(std::vector<float>(gb.size(), 0.0f), "b");
  opt->apply_gradients({{vec(ga), a}, {vec(gb), b}});
  const double global = std::sqrt(sum_squares(vec(ga)) + sum_squares(vec(gb)));
  const auto expected = [&](const std::vector<float>& g) {
    double scale = global > 15.0 ? 15.0 / global : 1.0;
    const double own = std::sqrt(sum_squares(vec(g)));
    if (own > 9.0) scale *= 9.0 / own;
    std::vector<float> w = scale_and_clip(vec(g), static_cast<float>(scale), 0.4f).to_vector<float>();
    for (float& x : w) x = 0.0f - x;  // SGD with lr 1 from 0
    return w;
  };
  EXPECT_EQ(values(a), expected(ga));
  EXPECT_EQ(values(b), expected(gb));
  EXPECT_NE(values(a), std::vector<float>(ga.size(), 0.0f));
}

TEST(Clipping, ClipvalueClipsElementwise) {
  optimizers::SGDOptions o;
  o.learning_rate = 1.0;
  o.clipvalue = 0.5;
  auto opt = optimizers::SGD(o);
  Variable a = var({0.0f, 0.0f, 0.0f});
  opt->apply_gradients({{vec({2.0f, -3.0f, 0.25f}), a}});
  expect_near_all(values(a), {-0.5, 0.5, -0.25}, 1e-7);
}

TEST(Schedule, LearningRateFollowsTheStep) {
  optimizers::SGDOptions o;
  o.schedule = [](std::int64_t step) { return 0.1 / static_cast<double>(step + 1); };
  auto opt = optimizers::SGD(o);
  EXPECT_DOUBLE_EQ(opt->current_learning_rate(), 0.1);
  Variable w = var({0.0f});
  double want = 0;
  for (int s = 0; s < 3; ++s) {
    opt->apply_gradients({{vec({1.0f}), w}});
    want -= 0.1 / (s + 1);
    EXPECT_NEAR(values(w)[0], want, 1e-6) << "after step " << s;
  }
  EXPECT_NEAR(opt->current_learning_rate(), 0.1 / 4, 1e-12);
}

TEST(ApplyGradients, UndefinedGradientSkipsTheVariable) {
  auto opt = optimizers::Adam(0.1);
  Variable a = var({1.0f, 1.0f}, "a"), b = var({1.0f, 1.0f}, "b");
  opt->apply_gradients({{Tensor(), a}, {vec({1.0f, 1.0f}), b}});
  expect_near_all(values(a), {1.0, 1.0}, 0.0);
  EXPECT_LT(values(b)[0], 0.95f);
  EXPECT_EQ(opt->iterations(), 1);
}

TEST(ApplyGradients, ShapeMismatchNamesTheVariable) {
  auto opt = optimizers::SGD(0.1);
  Variable w = var({1.0f, 2.0f}, "dense/kernel");
  try {
    opt->apply_gradients({{vec({1.0f, 2.0f, 3.0f}), w}});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dense/kernel"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(3,)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(2,)"), std::string::npos) << msg;
  }
  expect_near_all(values(w), {1.0, 2.0}, 0.0);
}

// Keras 3's RMSprop (keras/src/optimizers/rmsprop.py): v = rho v + (1 - rho) g^2; centered:
// a = rho a + (1 - rho) g and the denominator sqrt((v - a^2) + eps), else sqrt(v + eps);
// x = lr g / denominator; with momentum m = momentum m + x, w -= m; else w -= x.
struct RmspropReference {
  std::vector<double> w, v, m, a;
};
// Six steps' gradients of a three-element variable: signs that change, magnitudes over 10^4.
const std::vector<std::vector<float>> kRmsGrads = {{0.5f, -1.0f, 4.0f},    {-0.25f, 2.0f, 3.5f},
                                                   {1.5f, 0.125f, -0.01f}, {0.75f, -0.5f, 0.02f},
                                                   {-2.0f, 0.001f, 1.0f},  {0.3f, 0.9f, -3.0f}};
const std::vector<float> kRmsW0 = {1.0f, -2.0f, 0.5f};

RmspropReference rmsprop_reference(double lr, double rho, double momentum, double eps, bool centered,
                                   std::size_t steps) {
  RmspropReference r{{kRmsW0.begin(), kRmsW0.end()}, std::vector<double>(3), std::vector<double>(3),
                     std::vector<double>(3)};
  for (std::size_t s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < 3; ++i) {
      const double g = kRmsGrads[s][i];
      r.v[i] = rho * r.v[i] + (1 - rho) * g * g;
      double d = r.v[i] + eps;
      if (centered) {
        r.a[i] = rho * r.a[i] + (1 - rho) * g;
        d = r.v[i] - r.a[i] * r.a[i] + eps;
      }
      const double x = lr * g / std::sqrt(d);
      if (momentum > 0) {
        r.m[i] = momentum * r.m[i] + x;
        r.w[i] -= r.m[i];
      } else {
        r.w[i] -= x;
      }
    }
  }
  return r;
}

TEST(RMSprop, DefaultsAreKeras3s) {
  auto opt = optimizers::RMSprop();
  EXPECT_EQ(opt->name(), "RMSprop");
  EXPECT_DOUBLE_EQ(opt->current_learning_rate(), 0.001);
  const std::map<std::string, double> want{{"rho", 0.9}, {"momentum", 0.0}, {"epsilon", 1e-7}, {"centered", 0.0}};
  EXPECT_EQ(opt->hyperparameters(), want);
}

// Keras' docstring example: RMSprop(0.1) minimising var1^2 / 2 from 10 (gradient 10) gives 9.683772.
TEST(RMSprop, KerasDocstringExample) {
  Variable w = var({10.0f});
  optimizers::RMSprop(0.1)->apply_gradients({{vec({10.0f}), w}});
  EXPECT_NEAR(values(w)[0], 9.683772, 1e-6);
}

// Each variant (centered, momentum, both) over six steps against the float64 rule, its slots by
// Keras' names and values; each variant ends elsewhere than plain RMSprop (the option matters).
TEST(RMSprop, SixStepsOfEachVariantMatchKerasFormulas) {
  const RmspropReference plain = rmsprop_reference(0.01, 0.9, 0.0, 1e-7, false, kRmsGrads.size());
  for (const bool centered : {false, true}) {
    for (const double momentum : {0.0, 0.5}) {
      SCOPED_TRACE(std::string(centered ? "centered" : "plain") + ", momentum " + std::to_string(momentum));
      optimizers::RMSpropOptions o;
      o.learning_rate = 0.01;
      o.momentum = momentum;
      o.centered = centered;
      auto opt = optimizers::RMSprop(o);
      Variable w = var(kRmsW0);
      for (std::size_t s = 1; s <= kRmsGrads.size(); ++s) {
        opt->apply_gradients({{vec(kRmsGrads[s - 1]), w}});
        expect_near_all(values(w), rmsprop_reference(0.01, 0.9, momentum, 1e-7, centered, s).w, 2e-6);
      }
      const RmspropReference want = rmsprop_reference(0.01, 0.9, momentum, 1e-7, centered, kRmsGrads.size());
      std::vector<std::string> names;
      for (const auto& [name, t] : opt->slots(w)) {
        names.push_back(name);
        const std::vector<double>& ref = name == "velocity" ? want.v : name == "momentum" ? want.m : want.a;
        expect_near_all(t.to_vector<float>(), ref, 1e-5);
      }
      std::vector<std::string> keras{"velocity"};
      if (momentum > 0) keras.emplace_back("momentum");
      if (centered) keras.emplace_back("average_gradient");
      EXPECT_EQ(names, keras);
      if (centered || momentum > 0) {
        double most = 0;
        for (std::size_t i = 0; i < 3; ++i) most = std::max(most, std::fabs(values(w)[i] - plain.w[i]));
        EXPECT_GT(most, 1e-3);
      }
    }
  }
}

TEST(RMSprop, RhoAndEpsilonAreKeras) {
  optimizers::RMSpropOptions o;
  o.learning_rate = 0.05;
  o.rho = 0.5;
  o.epsilon = 0.1;
  o.centered = true;
  auto opt = optimizers::RMSprop(o);
  Variable w = var(kRmsW0);
  for (const auto& g : kRmsGrads) opt->apply_gradients({{vec(g), w}});
  expect_near_all(values(w), rmsprop_reference(0.05, 0.5, 0.0, 0.1, true, kRmsGrads.size()).w, 2e-6);
}

TEST(RMSprop, InvalidOptionsAreNamed) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {-0.1, 1.5, inf, nan}) {
    optimizers::RMSpropOptions o;
    o.rho = bad;
    EXPECT_THROW(optimizers::RMSprop(o), ValueError) << bad;
    o.rho = 0.9;
    o.momentum = bad;
    EXPECT_THROW(optimizers::RMSprop(o), ValueError) << bad;
  }
  for (const double bad : {-1e-7, inf, nan}) {
    optimizers::RMSpropOptions o;
    o.epsilon = bad;
    EXPECT_THROW(optimizers::RMSprop(o), ValueError) << bad;
  }
  EXPECT_THROW(optimizers::RMSprop(-1e-3), ValueError);
}

TEST(Options, InvalidValuesThrow) {
  EXPECT_THROW(optimizers::SGD(-0.1), ValueError);
  EXPECT_THROW(optimizers::Adam(-1e-3), ValueError);
  EXPECT_THROW(optimizers::SGD(0.1, -0.5), ValueError);
  EXPECT_THROW(optimizers::SGD(0.1, 1.5), ValueError);
  optimizers::AdamOptions a;
  a.beta_1 = 1.0;
  EXPECT_THROW(optimizers::Adam(a), ValueError);
  a.beta_1 = 0.9;
  a.beta_2 = 1.0;
  EXPECT_THROW(optimizers::Adam(a), ValueError);
  optimizers::SGDOptions s;
  s.clipnorm = 0.0;
  EXPECT_THROW(optimizers::SGD(s), ValueError);
  EXPECT_THROW(optimizers::AdamW(1e-3, -0.1), ValueError);
  EXPECT_THROW(optimizers::get("rmsprop_typo", 0.1), ValueError);
}

// inf and NaN hyper-parameters once trained to NaN and were saved as JSON null (unloadable).
TEST(Options, NonFiniteHyperParametersAndNegativeIterationsAreRefused) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {inf, -inf, nan}) {
    EXPECT_THROW(optimizers::Adam(bad), ValueError) << bad;
    EXPECT_THROW(optimizers::SGD(bad), ValueError) << bad;
    EXPECT_THROW(optimizers::AdamW(1e-3, bad), ValueError) << bad;
    optimizers::AdamOptions a;
    a.epsilon = bad;
    EXPECT_THROW(optimizers::Adam(a), ValueError) << bad;
    optimizers::SGDOptions s;
    s.clipnorm = bad;
    EXPECT_THROW(optimizers::SGD(s), ValueError) << bad;
    auto opt = optimizers::Adam(1e-3);
    EXPECT_THROW(opt->set_learning_rate(bad), ValueError) << bad;
    EXPECT_DOUBLE_EQ(opt->current_learning_rate(), 1e-3);
  }
  auto opt = optimizers::Adam(1e-3);
  EXPECT_THROW(opt->set_iterations(-1), ValueError);
  EXPECT_EQ(opt->iterations(), 0);
}

// Keras 3's learning_rate setter raises TypeError for an optimizer made with a schedule (a
// LearningRateSchedule or a function): a rate never replaces the schedule, which it silently did.
TEST(Options, ARateIsNotSettableOnAnOptimizerMadeWithASchedule) {
  auto opt = optimizers::get("sgd", optimizers::schedules::ExponentialDecay(1.0, 1, 0.5));
  try {
    opt->set_learning_rate(0.1);
    ADD_FAILURE() << "no TypeError";
  } catch (const TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("was created with a `LearningRateSchedule` object as its `learning_rate` "
                                         "constructor argument, hence its learning rate is not settable"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(opt->learning_rate_at(3), 0.125) << "the schedule stays";
  optimizers::SGDOptions o;
  o.schedule = [](std::int64_t) { return 0.5; };
  EXPECT_THROW(optimizers::SGD(o)->set_learning_rate(0.1), TypeError);
}

TEST(Options, GetByName) {
  EXPECT_EQ(optimizers::get("sgd", 0.1)->name(), "SGD");
  EXPECT_EQ(optimizers::get("adam", 0.1)->name(), "Adam");
  EXPECT_EQ(optimizers::get("adamw", 0.1)->name(), "AdamW");
  EXPECT_EQ(optimizers::get("rmsprop", 0.1)->name(), "RMSprop");
  EXPECT_EQ(optimizers::get("RMSprop", 0.1)->name(), "RMSprop");
  EXPECT_DOUBLE_EQ(optimizers::get("adam", 0.25)->current_learning_rate(), 0.25);
}

}  // namespace
}  // namespace lockstep
