// Learning-rate schedules against Keras 3's formulas (keras/src/optimizers/schedules), written
// out again here step by step, at every step of a run and past its end; plus points from
// Keras' docstrings worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "common/error_message.hpp"
#include "lockstep/optimizers/schedules.hpp"

namespace lockstep {
namespace {

namespace sch = optimizers::schedules;
constexpr double kPi = std::numbers::pi;

void expect_rel(double got, double want, std::int64_t step) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << "at step " << step;
}

TEST(Schedules, ExponentialDecayFollowsItsFormulaAtEveryStep) {
  const auto smooth = sch::ExponentialDecay(0.1, 7, 0.5);
  const auto stairs = sch::ExponentialDecay(0.1, 7, 0.5, /*staircase=*/true);
  for (std::int64_t s = 0; s <= 50; ++s) {
    expect_rel(smooth(s), 0.1 * std::pow(0.5, static_cast<double>(s) / 7.0), s);
    expect_rel(stairs(s), 0.1 * std::pow(0.5, static_cast<double>(s / 7)), s);
  }
  EXPECT_DOUBLE_EQ(stairs(6), 0.1);
  EXPECT_DOUBLE_EQ(stairs(7), 0.05);
}

TEST(Schedules, PiecewiseConstantDecayIncludesEachBoundaryInTheValueBeforeIt) {
  // Keras' docstring: 1.0 for the first 100001 steps, 0.5 for the next 10000, then 0.1.
  const auto lr = sch::PiecewiseConstantDecay({100000, 110000}, {1.0, 0.5, 0.1});
  EXPECT_EQ(lr(0), 1.0);
  EXPECT_EQ(lr(100000), 1.0);
  EXPECT_EQ(lr(100001), 0.5);
  EXPECT_EQ(lr(110000), 0.5);
  EXPECT_EQ(lr(110001), 0.1);
  const auto small = sch::PiecewiseConstantDecay({3, 5}, {3.0, 2.0, 1.0});
  for (std::int64_t s = 0; s <= 10; ++s) EXPECT_EQ(small(s), s <= 3 ? 3.0 : s <= 5 ? 2.0 : 1.0) << "at step " << s;
}

TEST(Schedules, CosineDecayFollowsItsFormulaWithAlpha) {
  const auto lr = sch::CosineDecay(0.2, 40, {.alpha = 0.1});
  for (std::int64_t s = 0; s <= 60; ++s) {
    const double t = std::min<double>(static_cast<double>(s), 40.0);
    expect_rel(lr(s), 0.2 * (0.9 * 0.5 * (1 + std::cos(kPi * t / 40.0)) + 0.1), s);
  }
  expect_rel(lr(20), 0.2 * (0.9 * 0.5 + 0.1), 20);  // half way: the mean of the two ends
  expect_rel(lr(1000), 0.02, 1000);                 // alpha x the rate after the end
}

TEST(Schedules, CosineDecayWarmsUpToItsTargetThenDecaysFromIt) {
  const auto lr = sch::CosineDecay(0.1, 100, {.warmup_target = 1.0, .warmup_steps = 10});
  for (std::int64_t s = 0; s <= 130; ++s) {
    const double t = std::min<double>(static_cast<double>(s), 110.0);
    const double want = t < 10 ? 0.1 + 0.9 * t / 10.0 : 0.5 * (1 + std::cos(kPi * (t - 10.0) / 100.0));
    expect_rel(lr(s), want, s);
  }
  expect_rel(lr(5), 0.55, 5);
  expect_rel(lr(10), 1.0, 10);
  expect_rel(lr(60), 0.5, 60);
  EXPECT_NEAR(lr(110), 0.0, 1e-15);
}

TEST(Schedules, PolynomialDecayStopsAtTheEndOrCycles) {
  const auto lin = sch::PolynomialDecay(0.1, 10, 0.01);
  const auto sq = sch::PolynomialDecay(0.1, 10, 0.01, 2.0);
  const auto cyc = sch::PolynomialDecay(0.1, 10, 0.01, 0.5, /*cycle=*/true);
  for (std::int64_t s = 0; s <= 35; ++s) {
    const double t = std::min<double>(static_cast<double>(s), 10.0);
    expect_rel(lin(s), 0.09 * (1 - t / 10.0) + 0.01, s);
    expect_rel(sq(s), 0.09 * std::pow(1 - t / 10.0, 2.0) + 0.01, s);
    const double period = s == 0 ? 10.0 : 10.0 * std::ceil(static_cast<double>(s) / 10.0);
    expect_rel(cyc(s), 0.09 * std::sqrt(1 - static_cast<double>(s) / period) + 0.01, s);
  }
  EXPECT_DOUBLE_EQ(cyc(10), 0.01);  // the end of the first period, then it jumps back up
  EXPECT_GT(cyc(11), 0.05);
}

TEST(Schedules, LinearWarmupRisesToTheWrappedScheduleThenFollowsItShifted) {
  const auto inner = sch::ExponentialDecay(0.4, 5, 0.5);
  const auto lr = sch::LinearWarmup(inner, 8, 0.0);
  for (std::int64_t s = 0; s <= 30; ++s) {
    const double want = s < 8 ? 0.4 * static_cast<double>(s) / 8.0 : inner(s - 8);
    expect_rel(lr(s), want, s);
  }
  const auto constant = sch::LinearWarmup(sch::Constant(0.3), 4, 0.1);
  EXPECT_DOUBLE_EQ(constant(0), 0.1);
  EXPECT_DOUBLE_EQ(constant(2), 0.2);
  EXPECT_DOUBLE_EQ(constant(4), 0.3);
  EXPECT_DOUBLE_EQ(constant(400), 0.3);
  // No warmup: the schedule itself.
  EXPECT_DOUBLE_EQ(sch::LinearWarmup(inner, 0)(3), inner(3));
}

TEST(Schedules, LinearScalingRule) {
  EXPECT_DOUBLE_EQ(sch::scaled_learning_rate(0.1, 256, 8192), 3.2);  // Goyal et al.'s ImageNet recipe
  EXPECT_DOUBLE_EQ(sch::scaled_learning_rate(1e-3, 32, 16), 5e-4);
  EXPECT_THROW(sch::scaled_learning_rate(0.1, 0, 32), ValueError);
  EXPECT_THROW(sch::scaled_learning_rate(-0.1, 32, 32), ValueError);
}

TEST(Schedules, TheOptimizerUsesTheScheduleAtItsOwnStep) {
  auto opt = optimizers::get("sgd", sch::PiecewiseConstantDecay({1}, {1.0, 0.25}));
  EXPECT_EQ(opt->name(), "SGD");
  Variable w(Tensor::from_vector(std::vector<float>{0.0f}, Shape{1}), "w");
  const Tensor g = Tensor::from_vector(std::vector<float>{1.0f}, Shape{1});
  double want = 0;
  for (int s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(opt->current_learning_rate(), s <= 1 ? 1.0 : 0.25);
    opt->apply_gradients({{g, w}});
    want -= s <= 1 ? 1.0 : 0.25;
    EXPECT_NEAR(w.value().to_vector<float>()[0], want, 1e-6) << "after step " << s;
  }
  EXPECT_EQ(optimizers::get("adamw", sch::Constant(0.5))->name(), "AdamW");
}

TEST(Schedules, BadArgumentsAreValueErrorsNamingThem) {
  const auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([] { sch::ExponentialDecay(0.1, 0, 0.5); }).find("decay_steps"), std::string::npos);
  EXPECT_NE(message([] { sch::CosineDecay(NAN, 10); }).find("initial_learning_rate"), std::string::npos);
  EXPECT_NE(message([] { sch::CosineDecay(0.1, 10, {.alpha = 2}); }).find("alpha"), std::string::npos);
  EXPECT_NE(message([] { sch::PiecewiseConstantDecay({1, 2}, {1.0}); }).find("one more value"), std::string::npos);
  EXPECT_NE(message([] { sch::PiecewiseConstantDecay({2, 2}, {1.0, 1.0, 1.0}); }).find("increase"), std::string::npos);
  EXPECT_NE(message([] { sch::PolynomialDecay(0.1, 10, 0.0, -1); }).find("power"), std::string::npos);
  EXPECT_NE(message([] { sch::LinearWarmup(nullptr, 3); }).find("empty"), std::string::npos);
  EXPECT_NE(message([] { optimizers::get("adagrad", sch::Constant(0.1)); }).find("adagrad"), std::string::npos);
  EXPECT_NEAR(optimizers::get("rmsprop", sch::ExponentialDecay(0.1, 2, 0.5))->learning_rate_at(4), 0.025, 1e-8);
}

// What keras.optimizers.Adam(ExponentialDecay(0.1, 7, 0.5)).get_config()["learning_rate"] is
// in Keras 3.
TEST(Schedules, SerializeWritesKerasConfig) {
  const nlohmann::json keras = nlohmann::json::parse(R"({"module": "keras.optimizers.schedules",
      "class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.1, "decay_steps": 7,
      "decay_rate": 0.5, "staircase": false, "name": "ExponentialDecay"}, "registered_name": null})");
  EXPECT_EQ(sch::serialize(sch::ExponentialDecay(0.1, 7, 0.5)), keras);
  EXPECT_TRUE(sch::serialize(sch::CosineDecay(0.2, 40, {.alpha = 0.1}))["config"]["warmup_target"].is_null());
  // Keras has no class for these: nothing to write.
  EXPECT_TRUE(sch::serialize(sch::Constant(0.1)).is_null());
  EXPECT_TRUE(sch::serialize(sch::LinearWarmup(sch::Constant(0.1), 3)).is_null());
  EXPECT_TRUE(sch::serialize([](std::int64_t) { return 0.5; }).is_null());
}

TEST(Schedules, DeserializeGivesBackTheSameRatesAtEveryStep) {
  const std::vector<optimizers::Schedule> all = {
      sch::ExponentialDecay(0.1, 7, 0.5, true), sch::PiecewiseConstantDecay({3, 5, 60}, {3.0, 2.0, 1.0, 0.5}),
      sch::CosineDecay(0.2, 40, {.alpha = 0.1}), sch::CosineDecay(0.1, 100, {.warmup_target = 1.0, .warmup_steps = 10}),
      sch::PolynomialDecay(0.1, 10, 0.01, 0.5, true)};
  for (const auto& s : all) {
    const nlohmann::json j = sch::serialize(s);
    ASSERT_FALSE(j.is_null());
    const auto back = sch::deserialize(nlohmann::json::parse(j.dump()));
    for (std::int64_t step = 0; step <= 130; ++step) EXPECT_EQ(back(step), s(step)) << j.dump() << " at step " << step;
    EXPECT_EQ(sch::serialize(back), j);
  }
  // Keras' defaults for arguments a config leaves out.
  const auto poly = sch::deserialize({{"class_name", "PolynomialDecay"},
                                      {"config", {{"initial_learning_rate", 0.1}, {"decay_steps", 10}}}});
  EXPECT_DOUBLE_EQ(poly(10), 0.0001);
}

TEST(Schedules, DeserializeNamesWhatItCannotRead) {
  const auto message = [](const nlohmann::json& j) -> std::string {
    try {
      sch::deserialize(j);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const nlohmann::json exp = sch::serialize(sch::ExponentialDecay(0.1, 7, 0.5));
  nlohmann::json j = exp;
  j["class_name"] = "InverseTimeDecay";
  EXPECT_NE(message(j).find("schedule InverseTimeDecay is not supported"), std::string::npos) << message(j);
  j = exp;
  j["config"]["decay_steps"] = "7";
  EXPECT_NE(message(j).find("learning-rate schedule ExponentialDecay: argument decay_steps=\"7\" must be an integer"), std::string::npos)
      << message(j);
  j = exp;
  j["config"].erase("decay_rate");
  EXPECT_NE(message(j).find("missing argument decay_rate"), std::string::npos) << message(j);
  j = exp;
  j["config"]["cycle"] = true;
  EXPECT_NE(message(j).find("argument cycle=true is not supported"), std::string::npos) << message(j);
  j = exp;
  j["config"]["decay_steps"] = 0;
  EXPECT_NE(message(j).find("decay_steps must be > 0"), std::string::npos) << message(j);
  EXPECT_NE(message(nlohmann::json(0.1)).find("must be {\"class_name\""), std::string::npos);
}

// Every class: an unknown key is refused naming the class, the key and its value (the message
// optimizers and metrics give too); Keras' "off" for it (null, false) passes.
TEST(Schedules, EveryClassRefusesAnUnknownKeyNamingClassAndKey) {
  for (const optimizers::Schedule& s : {sch::ExponentialDecay(0.1, 7, 0.5), sch::PiecewiseConstantDecay({3}, {0.1, 0.01}),
                                 sch::CosineDecay(0.1, 10), sch::PolynomialDecay(0.1, 10)}) {
    nlohmann::json j = sch::serialize(s);
    const std::string cls = j.at("class_name");
    SCOPED_TRACE(cls);
    j["config"]["bogus"] = 2;
    EXPECT_VALUE_ERROR(sch::deserialize(j), "learning-rate schedule " + cls + ": argument bogus=2 is not supported");
    j["config"]["bogus"] = false;
    j["config"]["unused"] = nullptr;
    EXPECT_EQ(sch::serialize(sch::deserialize(j)), sch::serialize(s));
  }
}

}  // namespace
}  // namespace lockstep
