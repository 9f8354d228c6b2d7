// The CPU's vector sigmoid, tanh and silu (backend/cpu/activations.hpp) against double precision over
// their whole useful range, tiny arguments (tanh's relative accuracy) and the special values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/activations.hpp"

using lockstep::backend::cpu::sigmoid_floats;
using lockstep::backend::cpu::silu_backward_floats;
using lockstep::backend::cpu::silu_floats;
using lockstep::backend::cpu::tanh_floats;

namespace {
// Arguments: a dense sweep of [-30, 30], then tiny magnitudes of both signs down to denormals.
std::vector<float> arguments() {
  std::vector<float> x;
  for (int i = -300000; i <= 300000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
  for (float t = 1e-40f; t < 1.0f; t *= 1.37f) {
    x.push_back(t);
    x.push_back(-t);
  }
  return x;
}

// The largest error in units of float32's spacing at the true value (1 ulp = 2^-23 relative).
template <typename Fn, typename Ref>
double worst_ulps(Fn fn, Ref ref) {
  const std::vector<float> x = arguments();
  std::vector<float> y(x.size());
  fn(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = ref(static_cast<double>(x[i]));
    const double ulp = std::max(std::fabs(want), static_cast<double>(std::numeric_limits<float>::min())) * 0x1p-23;
    worst = std::max(worst, std::fabs(y[i] - want) / ulp);
  }
  return worst;
}
}  // namespace

TEST(CpuActivations, SigmoidAndTanhAreWithinTwoUlpsEverywhere) {
  const double sigmoid = worst_ulps(sigmoid_floats, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  const double tanh = worst_ulps(tanh_floats, [](double v) { return std::tanh(v); });
  RecordProperty("sigmoid_worst_ulps", std::to_string(sigmoid));
  RecordProperty("tanh_worst_ulps", std::to_string(tanh));
  EXPECT_LE(sigmoid, 2.0);
  EXPECT_LE(tanh, 2.0);
}

TEST(CpuActivations, SpecialValuesAndEveryPositionOfAVector) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {inf, -inf, nan, 0.0f, -0.0f, 100.0f, -100.0f};
  std::vector<float> s(x.size()), t(x.size());
  sigmoid_floats(x.data(), s.data(), static_cast<std::int64_t>(x.size()));
  tanh_floats(x.data(), t.data(), static_cast<std::int64_t>(x.size()));
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 0.5f);
  EXPECT_EQ(s[5], 1.0f);
  EXPECT_EQ(s[6], 0.0f);
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], -1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_TRUE(t[3] == 0.0f && !std::signbit(t[3]));
  EXPECT_TRUE(t[4] == 0.0f && std::signbit(t[4]));  // tanh(-0) = -0
  EXPECT_EQ(t[5], 1.0f);
  EXPECT_EQ(t[6], -1.0f);
  // One value at every offset of a range (a vector's lanes, the padded tail): the same bits.
  const float v = 0.731f;
  float alone_s, alone_t;
  sigmoid_floats(&v, &alone_s, 1);
  tanh_floats(&v, &alone_t, 1);
  for (int n = 1; n <= 40; ++n) {
    std::vector<float> in(static_cast<std::size_t>(n), v), out(in.size());
    sigmoid_floats(in.data(), out.data(), n);
    for (float o : out) EXPECT_EQ(o, alone_s) << n;
    tanh_floats(in.data(), out.data(), n);
    for (float o : out) EXPECT_EQ(o, alone_t) << n;
  }
}

// silu (Keras' swish) = x sigmoid(x): within 3 ulps of the true value everywhere on the sweep. Its
// gradient s (1 + x (1 - s)) cancels near x = -1.28 (where it is 0), so its error is measured
// against the size of its terms, s (1 + |x| (1 - s)).
TEST(CpuActivations, SiluAndItsGradientAgreeWithDoublePrecision) {
  const double silu = worst_ulps(silu_floats, [](double v) { return v / (1.0 + std::exp(-v)); });
  RecordProperty("silu_worst_ulps", std::to_string(silu));
  EXPECT_LE(silu, 3.0);

  const std::vector<float> x = arguments();
  const std::vector<float> g(x.size(), 1.0f);
  std::vector<float> dx(x.size());
  silu_backward_floats(x.data(), g.data(), dx.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double u = x[i], s = 1.0 / (1.0 + std::exp(-u));
    const double want = s * (1.0 + u * (1.0 - s)), terms = s * (1.0 + std::fabs(u) * (1.0 - s));
    worst = std::max(worst, std::fabs(dx[i] - want) / (std::max(terms, 1e-38) * 0x1p-23));
  }
  RecordProperty("silu_grad_worst_ulps_of_terms", std::to_string(worst));
  EXPECT_LE(worst, 4.0);
  // The upstream gradient scales it; NaN stays NaN.
  const float u[2] = {0.5f, std::numeric_limits<float>::quiet_NaN()}, dy[2] = {-2.0f, 1.0f};  // a power of two: scaling is exact
  float one[2], scaled[2];
  const float ones[2] = {1.0f, 1.0f};
  silu_backward_floats(u, ones, one, 2);
  silu_backward_floats(u, dy, scaled, 2);
  EXPECT_EQ(scaled[0], -2.0f * one[0]);
  EXPECT_TRUE(std::isnan(scaled[1]));
}
