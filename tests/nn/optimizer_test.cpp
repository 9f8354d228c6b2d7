// Optimizers against Keras' update rules, computed by hand in double precision here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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
  EXPECT_DOUBLE_EQ(optimizers::get("adam", 0.25)->current_learning_rate(), 0.25);
}

}  // namespace
}  // namespace lockstep
