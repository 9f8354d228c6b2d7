// Max pooling over a ReLU's output: the tape lets the pooling backward apply the ReLU's mask
// and the ReLU skip its own pass (BackwardHints). The gradients must be the ones the two
// passes give, whatever else reads the ReLU's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/ops.hpp"
#include "common/random_data.hpp"


using namespace lockstep;

namespace {
void expect_equal(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  std::size_t differ = 0, nonzero = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    differ += g[i] != w[i];
    nonzero += w[i] != 0.0f;
  }
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << g.size() << " elements differ";
  EXPECT_GT(nonzero, 0u) << what << ": the reference gradient is all zeros, the test checks nothing";
}

// x (N, 9, 9, 16) -> conv2d 3x3 (16 filters, bias, ReLU) -> a (N, 7, 7, 16) -> max_pool2d 2x2
// -> p (N, 3, 3, 16); the loss is sum(p * r) [+ sum(a * r2) when a has a second reader].
struct Net {
  Tensor x = test::random_uniform({3, 9, 9, 16}, 1);
  Tensor w = test::random_uniform({3, 3, 16, 16}, 2);
  Tensor b = test::random_uniform({16}, 3);
  Tensor r = test::random_uniform({3, 3, 3, 16}, 4);
  Tensor r2 = test::random_uniform({3, 7, 7, 16}, 5);
  Conv2dOptions conv{.activation = FusedActivation::kRelu};
  Pool2dOptions pool{};

  // dw, db by the tape.
  std::vector<Tensor> taped(bool second_reader, bool fused_relu) {
    GradientTape tape;
    tape.watch(w);
    tape.watch(b);
    Conv2dOptions o = conv;
    if (!fused_relu) o.activation = FusedActivation::kNone;
    Tensor a = conv2d(x, w, b, o);
    if (!fused_relu) a = relu(a);
    Tensor loss = sum(mul(max_pool2d(a, pool), r));
    if (second_reader) loss = add(loss, sum(mul(a, r2)));
    return tape.gradient(loss, std::vector<Tensor>{w, b});
  }
  // dw, db by the two passes spelled out: pooling's plain backward, then the ReLU's mask.
  std::vector<Tensor> by_hand(bool second_reader) {
    const Tensor a = conv2d(x, w, b, conv);
    const Tensor p = max_pool2d(a, pool);
    Tensor da = pool2d_grad(true, a, p, r, pool);
    if (second_reader) da = add(da, r2);
    const Tensor dz = unary_grad(OpType::kRelu, a, a, da);
    Conv2dOptions o = conv;
    o.activation = FusedActivation::kNone;
    auto [dw, db] = conv2d_kernel_grad(x, dz, w.shape(), true, o);
    return {dw, db};
  }
};
}  // namespace

TEST(ReluPoolBackward, FusedReluThenMaxPoolGivesTheTwoPassGradient) {
  Net net;
  const auto got = net.taped(false, true), want = net.by_hand(false);
  expect_equal(got[0], want[0], "kernel gradient");
  expect_equal(got[1], want[1], "bias gradient");
}

TEST(ReluPoolBackward, StandaloneReluThenMaxPoolGivesTheTwoPassGradient) {
  Net net;
  const auto got = net.taped(false, false), want = net.by_hand(false);
  expect_equal(got[0], want[0], "kernel gradient");
  expect_equal(got[1], want[1], "bias gradient");
}

// The second reader's gradient is not masked by the pooling, so the ReLU must mask the sum.
TEST(ReluPoolBackward, ASecondReaderOfTheReluOutputIsStillMasked) {
  Net net;
  for (bool fused : {true, false}) {
    const auto got = net.taped(true, fused), want = net.by_hand(true);
    expect_equal(got[0], want[0], fused ? "kernel gradient, fused ReLU" : "kernel gradient, relu op");
    expect_equal(got[1], want[1], fused ? "bias gradient, fused ReLU" : "bias gradient, relu op");
  }
}

// Pooling over something that is not a ReLU's output keeps negative maxima's gradients.
TEST(ReluPoolBackward, MaxPoolOverANonReluInputPassesNegativeMaximaTheirGradient) {
  const Tensor x = test::random_uniform({2, 6, 6, 8}, 7);
  const Tensor r = test::random_uniform({2, 3, 3, 8}, 8);
  GradientTape tape;
  tape.watch(x);
  const Tensor p = max_pool2d(x, {});
  const Tensor dx = tape.gradient(sum(mul(p, r)), std::vector<Tensor>{x})[0];
  expect_equal(dx, pool2d_grad(true, x, p, r, {}), "input gradient");
  // Some window's maximum is negative here, and its gradient must have reached x.
  const auto pv = p.to_vector<float>(), dxv = dx.to_vector<float>();
  ASSERT_TRUE(std::any_of(pv.begin(), pv.end(), [](float v) { return v < 0.0f; }));
  double total = 0, want = 0;
  for (float v : dxv) total += v;
  for (float v : r.to_vector<float>()) want += v;
  EXPECT_NEAR(total, want, 1e-4);
}
