// The schedules as the device evaluates them (describe() + schedule_math::schedule_rate) give
// the bits the schedules always gave on the host: the old callables' expressions are written out
// here as they were, and every kind is compared bit for bit over thousands of steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include "lockstep/optimizers/schedules.hpp"
#include "nn/schedule_desc.hpp"

namespace lockstep {
namespace {

namespace sch = optimizers::schedules;
using schedule_math::schedule_rate;

double as_double(std::int64_t step) { return static_cast<double>(std::max<std::int64_t>(step, 0)); }

// The callables as they were before schedule_math (src/nn/schedules.cpp at 7964d0c), compiled as
// they were there: no caller's constants fold into them (noipa).
[[gnu::noipa]] double old_exponential(double initial, std::int64_t decay_steps, double rate, bool staircase, std::int64_t step) {
  double p = as_double(step) / static_cast<double>(decay_steps);
  if (staircase) p = std::floor(p);
  return initial * std::pow(rate, p);
}
[[gnu::noipa]] double old_cosine_decayed(double step, double from, std::int64_t decay_steps, double alpha) {
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * step / static_cast<double>(decay_steps)));
  return from * ((1.0 - alpha) * cosine + alpha);
}
[[gnu::noipa]] double old_cosine(double initial, std::int64_t decay_steps, double alpha, std::optional<double> target,
                  std::int64_t warmup_steps, std::int64_t step) {
  const double decay = static_cast<double>(decay_steps);
  if (!target) return old_cosine_decayed(std::min(as_double(step), decay), initial, decay_steps, alpha);
  const double warmup = static_cast<double>(warmup_steps);
  const double s = std::min(as_double(step), decay + warmup);
  if (s < warmup) return (*target - initial) * (s / warmup) + initial;
  return old_cosine_decayed(s - warmup, *target, decay_steps, alpha);
}
[[gnu::noipa]] double old_polynomial(double initial, std::int64_t decay_steps, double end, double power, bool cycle,
                      std::int64_t step_in) {
  double step = as_double(step_in);
  double steps = static_cast<double>(decay_steps);
  if (cycle) {
    steps *= step == 0 ? 1.0 : std::ceil(step / steps);
  } else {
    step = std::min(step, steps);
  }
  return (initial - end) * std::pow(1.0 - step / steps, power) + end;
}
[[gnu::noipa]] double old_warmup(const optimizers::Schedule& after, std::int64_t warmup_steps, double initial, std::int64_t step) {
  if (step >= warmup_steps) return after(step - warmup_steps);
  return (after(0) - initial) * (as_double(step) / static_cast<double>(warmup_steps)) + initial;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Over steps 0..n: the description, the schedule itself and the old expression agree bit for bit.
template <typename Old>
void expect_same_bits(const optimizers::Schedule& s, Old old, const char* what, std::int64_t n = 5000) {
  const auto d = sch::describe(s);
  ASSERT_TRUE(d.has_value()) << what;
  EXPECT_EQ(sch::capture_refusal(s), nullptr) << what;
  for (std::int64_t step = 0; step <= n; ++step) {
    const double want = old(step);
    ASSERT_TRUE(same_bits(s(step), want)) << what << " at step " << step << ": " << s(step) << " vs " << want;
    ASSERT_TRUE(same_bits(schedule_rate(*d, step), want))
        << what << " described, at step " << step << ": " << schedule_rate(*d, step) << " vs " << want;
  }
}

TEST(ScheduleDesc, EveryKerasScheduleIsDescribedWithTheSameBitsAsBefore) {
  expect_same_bits(sch::ExponentialDecay(0.1, 7, 0.96), [](auto s) { return old_exponential(0.1, 7, 0.96, false, s); },
                   "ExponentialDecay");
  expect_same_bits(sch::ExponentialDecay(3e-4, 100, 0.5, true),
                   [](auto s) { return old_exponential(3e-4, 100, 0.5, true, s); }, "ExponentialDecay staircase");
  const std::vector<std::int64_t> b{10, 200, 1999};
  const std::vector<double> v{1.0, 0.3, 0.07, 1e-3};
  expect_same_bits(sch::PiecewiseConstantDecay(b, v), [&](auto s) {
    return v[static_cast<std::size_t>(std::lower_bound(b.begin(), b.end(), s) - b.begin())];
  }, "PiecewiseConstantDecay");
  expect_same_bits(sch::CosineDecay(0.2, 3000, {.alpha = 0.1}),
                   [](auto s) { return old_cosine(0.2, 3000, 0.1, std::nullopt, 0, s); }, "CosineDecay");
  expect_same_bits(sch::CosineDecay(1e-4, 2500, {.warmup_target = 4e-3, .warmup_steps = 700}),
                   [](auto s) { return old_cosine(1e-4, 2500, 0.0, 4e-3, 700, s); }, "CosineDecay with warmup");
  expect_same_bits(sch::PolynomialDecay(0.1, 1234, 0.01, 0.7),
                   [](auto s) { return old_polynomial(0.1, 1234, 0.01, 0.7, false, s); }, "PolynomialDecay");
  expect_same_bits(sch::PolynomialDecay(0.1, 777, 0.001, 2.0, true),
                   [](auto s) { return old_polynomial(0.1, 777, 0.001, 2.0, true, s); }, "PolynomialDecay cycle");
  expect_same_bits(sch::Constant(0.0123), [](auto) { return 0.0123; }, "Constant");
  const auto inner = sch::CosineDecay(0.3, 4000, {.alpha = 0.05});
  expect_same_bits(sch::LinearWarmup(inner, 333, 1e-5), [&](auto s) { return old_warmup(inner, 333, 1e-5, s); },
                   "LinearWarmup around CosineDecay");
  const auto flat = sch::Constant(0.5);
  expect_same_bits(sch::LinearWarmup(flat, 0), [&](auto s) { return old_warmup(flat, 0, 0.0, s); },
                   "LinearWarmup of no steps");
}

TEST(ScheduleDesc, AFunctionOfOnesOwnHasNoDescriptionAndNamesWhyItCannotBeCaptured) {
  const optimizers::Schedule mine = [](std::int64_t step) { return 1.0 / static_cast<double>(step + 1); };
  EXPECT_FALSE(sch::describe(mine).has_value());
  ASSERT_NE(sch::capture_refusal(mine), nullptr);
  EXPECT_NE(std::string(sch::capture_refusal(mine)).find("a learning-rate schedule given as a function"),
            std::string::npos);
  // Nor a warmup around one, nor a warmup around a warmup: the host still evaluates them.
  EXPECT_FALSE(sch::describe(sch::LinearWarmup(mine, 5)).has_value());
  EXPECT_FALSE(sch::describe(sch::LinearWarmup(sch::LinearWarmup(sch::Constant(1.0), 3), 5)).has_value());
  EXPECT_EQ(sch::LinearWarmup(mine, 5)(7), 1.0 / 3.0);
  // A PiecewiseConstantDecay with more boundaries than a description holds.
  std::vector<std::int64_t> many;
  std::vector<double> values{1.0};
  for (int i = 1; i <= schedule_math::kMaxPiecewiseBoundaries + 1; ++i) {
    many.push_back(i * 10);
    values.push_back(1.0 / (i + 1));
  }
  const auto long_piecewise = sch::PiecewiseConstantDecay(many, values);
  EXPECT_FALSE(sch::describe(long_piecewise).has_value());
  EXPECT_EQ(long_piecewise(15), 0.5);
  // No schedule at all: nothing to refuse.
  EXPECT_EQ(sch::capture_refusal(optimizers::Schedule()), nullptr);
}

}  // namespace
}  // namespace lockstep
