// A finite-difference check for every differentiable op (one table row per op).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "lockstep/autograd/gradcheck.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/tensor/attention.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_resample.hpp"
#include "lockstep/tensor/ops_rows.hpp"

using namespace lockstep;

namespace {
Tensor randn(const Shape& s, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, s);
}
// Values kept away from 0 so kinks (relu, abs, clip) are not straddled by the finite difference.
Tensor away_from_zero(const Shape& s, std::uint64_t seed) {
  Tensor t = randn(s, seed);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] >= 0 ? p[i] + 0.1f : p[i] - 0.1f;
  return t;
}

// a + s per element, s = +-[0.2, 0.5) at random: the two sides of maximum / minimum differ
// everywhere (no kink inside the finite difference) and each side wins somewhere.
Tensor offset_from(const Tensor& a, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.2f, 0.5f);
  std::vector<float> v = a.to_vector<float>();
  for (auto& x : v) x += (rng() & 1) ? u(rng) : -u(rng);
  return Tensor::from_vector(v, a.shape());
}
// Multiples of `step` in [lo, hi): exact in the 16-bit dtypes the cast checks go through.
Tensor grid(const Shape& s, std::uint64_t seed, double lo, double hi, double step) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> k(static_cast<int>(lo / step), static_cast<int>(hi / step) - 1);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = static_cast<float>(k(rng) * step);
  return Tensor::from_vector(v, s);
}

struct OpCase {
  const char* name;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  std::vector<Tensor> inputs;
};

std::vector<OpCase> cases() {
  const Tensor labels = Tensor::from_vector<std::int64_t>({2, 0, 1, 2}, {4});
  return {
      {"add_broadcast", [](auto& v) { return add(v[0], v[1]); }, {randn({3, 4}, 1), randn({4}, 2)}},
      {"sub_broadcast", [](auto& v) { return sub(v[0], v[1]); }, {randn({3, 1}, 3), randn({1, 4}, 4)}},
      {"mul", [](auto& v) { return mul(v[0], v[1]); }, {randn({2, 3}, 5), randn({2, 3}, 6)}},
      {"div", [](auto& v) { return div(v[0], v[1]); }, {randn({2, 3}, 7), randn({2, 3}, 8, 0.5f, 2.0f)}},
      {"maximum", [](auto& v) { return maximum(v[0], v[1]); }, {randn({3, 3}, 9), add_scalar(randn({3, 3}, 9), 0.3f)}},
      {"minimum", [](auto& v) { return minimum(v[0], v[1]); }, {randn({3, 4}, 52), offset_from(randn({3, 4}, 52), 53)}},
      {"where_broadcast",
       [](auto& v) {
         const Tensor cond = Tensor::from_vector<std::uint8_t>({1, 0, 0, 1, 1, 0, 1, 0}, {2, 1, 4});
         return where(cond, v[0], v[1]);
       },
       {randn({3, 4}, 54), randn({2, 3, 1}, 55)}},
      {"scale", [](auto& v) { return scale(v[0], -2.5f); }, {randn({5}, 10)}},
      {"add_scalar", [](auto& v) { return add_scalar(v[0], 3.0f); }, {randn({5}, 11)}},
      {"pow_scalar", [](auto& v) { return pow_scalar(v[0], 3.0f); }, {randn({5}, 12, 0.5f, 2.0f)}},
      {"clip", [](auto& v) { return clip(v[0], -0.5f, 0.5f); }, {away_from_zero({6}, 13)}},
      {"neg", [](auto& v) { return neg(v[0]); }, {randn({4}, 14)}},
      {"exp", [](auto& v) { return exp(v[0]); }, {randn({4}, 15)}},
      {"log", [](auto& v) { return log(v[0]); }, {randn({4}, 16, 0.5f, 2.0f)}},
      {"sqrt", [](auto& v) { return sqrt(v[0]); }, {randn({4}, 17, 0.5f, 2.0f)}},
      {"square", [](auto& v) { return square(v[0]); }, {randn({4}, 18)}},
      {"abs", [](auto& v) { return abs(v[0]); }, {away_from_zero({6}, 19)}},
      {"relu", [](auto& v) { return relu(v[0]); }, {away_from_zero({6}, 20)}},
      {"sigmoid", [](auto& v) { return sigmoid(v[0]); }, {randn({6}, 21)}},
      {"tanh", [](auto& v) { return tanh(v[0]); }, {randn({6}, 22)}},
      {"gelu", [](auto& v) { return gelu(v[0]); }, {randn({6}, 23)}},
      {"gelu_tanh", [](auto& v) { return gelu(v[0], true); }, {randn({6}, 96, -3.0f, 3.0f)}},
      {"silu", [](auto& v) { return silu(v[0]); }, {randn({6}, 97, -4.0f, 4.0f)}},
      {"gather_rows_repeated", [](auto& v) {
         return gather_rows(v[0], Tensor::from_vector<std::int64_t>({2, 0, 2, 3, 2}, {5}));
       },
       {randn({4, 3}, 98)}},
      {"resample",
       [](auto& v) {
         // 7 outputs of 3 taps over 5 inputs: none reads input 4, output 3 reads input 1 twice,
         // weights of 0 pad the short ones.
         const HostTaps taps{.taps = 3,
                             .index = {0, 1, 0, 1, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 0, 0, 0, 0, 3, 2, 1},
                             .weight = {0.5f, 0.5f, 0, 0.2f, -0.7f, 1.1f, 1, 0, 0, 0.3f, 0.4f, -0.2f, 0.9f, 0.1f, 0,
                                        0.6f, 0, 0, -1, 2, 0.25f}};
         const auto on_device = [](const HostTaps& t) {
           const Shape s{static_cast<std::int64_t>(t.index.size()) / t.taps, t.taps};
           return ResampleTaps{Tensor::from_vector(t.index, s), Tensor::from_vector(t.weight, s)};
         };
         return resample(v[0], on_device(taps), on_device(transposed_taps(taps, 5)));
       },
       {randn({2, 5, 3}, 109)}},
      {"slice_rows", [](auto& v) { return slice_rows(v[0], 1, 3); }, {randn({4, 3}, 110)}},
      // Overlapping slices and a whole read of one tensor: the slices' gradients add up in place.
      {"slice_rows_overlapping",
       [](auto& v) { return concatenate({slice_rows(v[0], 1, 3), v[0], slice_rows(v[0], 0, 2)}, 0); },
       {randn({3, 2}, 111)}},
      // Slices whose gradients come each next to the rows written (copied), then one that does
      // not (the rows never written zeroed, then added in place); row 3 is never read.
      {"slice_rows_adjacent",
       [](auto& v) {
         return concatenate(
             {slice_rows(v[0], 1, 3), slice_rows(v[0], 0, 1), slice_rows(v[0], 1, 2), slice_rows(v[0], 2, 3)}, 0);
       },
       {randn({4, 2}, 116)}},
      {"concatenate_rows", [](auto& v) { return concatenate({v[0], v[1], v[0]}, 0); },
       {randn({1, 3}, 112), randn({2, 3}, 113)}},
      {"concatenate_after_ones", [](auto& v) { return concatenate({v[0], v[1]}, 1); },
       {randn({1, 2, 3}, 114), randn({1, 1, 3}, 115)}},
      {"concatenate_middle", [](auto& v) { return concatenate({v[0], v[1], v[0]}, 1); },
       {randn({2, 1, 3}, 99), randn({2, 2, 3}, 100)}},
      {"transpose", [](auto& v) { return transpose(v[0], {2, 0, 1}); }, {randn({2, 3, 4}, 101)}},
      {"softmax", [](auto& v) { return softmax(v[0]); }, {randn({3, 5}, 24)}},
      {"log_softmax", [](auto& v) { return log_softmax(v[0]); }, {randn({3, 5}, 25)}},
      {"matmul", [](auto& v) { return matmul(v[0], v[1]); }, {randn({3, 4}, 26), randn({4, 2}, 27)}},
      {"matmul_tt", [](auto& v) { return matmul(v[0], v[1], true, true); }, {randn({4, 3}, 28), randn({2, 4}, 29)}},
      {"batch_matmul", [](auto& v) { return batch_matmul(v[0], v[1]); }, {randn({2, 3, 4}, 90), randn({2, 4, 2}, 91)}},
      {"batch_matmul_tn", [](auto& v) { return batch_matmul(v[0], v[1], true, false); },
       {randn({2, 4, 3}, 92), randn({2, 4, 2}, 93)}},
      {"batch_matmul_nt", [](auto& v) { return batch_matmul(v[0], v[1], false, true); },
       {randn({2, 3, 4}, 94), randn({2, 2, 4}, 95)}},
      {"batch_matmul_broadcast_a", [](auto& v) { return batch_matmul(v[0], v[1]); },
       {randn({1, 3, 4}, 96), randn({3, 4, 2}, 97)}},
      {"batch_matmul_broadcast_b_tn", [](auto& v) { return batch_matmul(v[0], v[1], true, false); },
       {randn({3, 4, 3}, 98), randn({1, 4, 2}, 99)}},
      {"scaled_dot_product_attention", [](auto& v) { return scaled_dot_product_attention(v[0], v[1], v[2]); },
       {randn({2, 2, 3, 4}, 100), randn({2, 2, 5, 4}, 101), randn({2, 2, 5, 3}, 102)}},
      {"scaled_dot_product_attention_causal_mask_dropout",
       [mask = Tensor::from_vector<std::uint8_t>({1, 1, 0, 1, 1, 0, 1, 1}, {2, 4})](auto& v) {
         return scaled_dot_product_attention(v[0], v[1], v[2], mask,
                                             {.causal = true, .dropout_rate = 0.3f, .dropout_key = {.seed = 3}});
       },
       {randn({2, 1, 5, 4}, 103), randn({2, 1, 4, 4}, 104), randn({2, 1, 4, 2}, 105)}},
      {"scaled_dot_product_attention_heads_last_causal_dropout",
       [](auto& v) {
         return scaled_dot_product_attention(
             v[0], v[1], v[2], {},
             {.causal = true, .dropout_rate = 0.3f, .dropout_key = {.seed = 4}, .heads_last = true});
       },
       {randn({2, 5, 3, 4}, 106), randn({2, 5, 3, 4}, 107), randn({2, 5, 3, 2}, 108)}},
      {"dense", [](auto& v) { return dense(v[0], v[1], v[2]); }, {randn({3, 4}, 30), randn({4, 2}, 31), randn({2}, 32)}},
      {"dense_relu", [](auto& v) { return dense(v[0], v[1], v[2], FusedActivation::kRelu); },
       {randn({3, 4}, 33), randn({4, 5}, 34), randn({5}, 35, 0.3f, 0.6f)}},
      {"sum_all", [](auto& v) { return sum(v[0]); }, {randn({2, 3}, 36)}},
      {"sum_axis", [](auto& v) { return sum(v[0], 1, true); }, {randn({2, 3, 2}, 37)}},
      {"mean_axis", [](auto& v) { return mean(v[0], 0); }, {randn({4, 3}, 38)}},
      {"reduce_max", [](auto& v) { return reduce_max(v[0], 1); }, {randn({3, 4}, 39)}},
      {"reshape", [](auto& v) { return mul(reshape(v[0], {3, 2}), v[1]); }, {randn({2, 3}, 40), randn({3, 2}, 41)}},
      {"sparse_xent", [labels](auto& v) { return sparse_softmax_cross_entropy_with_logits(labels, v[0]); },
       {randn({4, 3}, 42)}},
      {"softmax_xent", [](auto& v) { return softmax_cross_entropy_with_logits(softmax(v[0]), v[1]); },
       {randn({4, 3}, 43), randn({4, 3}, 44)}},
      {"conv2d_valid_bias", [](auto& v) { return conv2d(v[0], v[1], v[2]); },
       {randn({2, 5, 6, 3}, 60), randn({3, 3, 3, 4}, 61), randn({4}, 62)}},
      {"conv2d_fused_relu", [](auto& v) { return conv2d(v[0], v[1], v[2], {.activation = FusedActivation::kRelu}); },
       {randn({2, 5, 6, 3}, 76), randn({3, 3, 3, 4}, 77), randn({4}, 78)}},
      {"conv2d_same_strided", [](auto& v) {
         return conv2d(v[0], v[1], Tensor(), {.strides = {2, 2}, .padding = {1, 1, 0, 1}});
       },
       {randn({2, 5, 4, 2}, 63), randn({3, 2, 2, 3}, 64)}},
      {"conv2d_dilated", [](auto& v) { return conv2d(v[0], v[1], v[2], {.dilation = {2, 1}}); },
       {randn({1, 7, 5, 2}, 65), randn({2, 3, 2, 3}, 66), randn({3}, 67)}},
      {"conv2d_depthwise", [](auto& v) { return conv2d(v[0], v[1], v[2], {.padding = {1, 1, 1, 1}, .groups = 3}); },
       {randn({2, 4, 4, 3}, 68), randn({3, 3, 1, 6}, 69), randn({6}, 70)}},
      {"max_pool2d", [](auto& v) { return max_pool2d(v[0], {.pool_size = {2, 2}, .strides = {2, 2}}); },
       {randn({2, 4, 6, 3}, 71)}},
      {"max_pool2d_overlapping_same", [](auto& v) {
         return max_pool2d(v[0], {.pool_size = {3, 3}, .strides = {2, 1}, .padding = {1, 1, 1, 1}});
       },
       {randn({1, 5, 4, 2}, 72)}},
      {"zero_pad2d", [](auto& v) { return mul(zero_pad2d(v[0], {1, 0, 2, 1}), v[1]); },
       {randn({2, 3, 2, 2}, 74), randn({2, 4, 5, 2}, 75)}},
      {"avg_pool2d_same", [](auto& v) {
         return avg_pool2d(v[0], {.pool_size = {2, 2}, .strides = {2, 2}, .padding = {0, 1, 0, 1}});
       },
       {randn({2, 5, 5, 3}, 73)}},
  };
}
}  // namespace

class OpGradcheck : public ::testing::TestWithParam<std::size_t> {};

TEST_P(OpGradcheck, MatchesFiniteDifferences) {
  const auto all = cases();
  const OpCase& c = all[GetParam()];
  const GradcheckResult r = gradcheck(c.f, c.inputs);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message << " (max abs error " << r.max_abs_error << ")";
}
INSTANTIATE_TEST_SUITE_P(EveryOp, OpGradcheck, ::testing::Range<std::size_t>(0, cases().size()),
                         [](const auto& info) { return std::string(cases()[info.param].name); });

TEST(Gradcheck, CastBetweenFloatingDtypes) {
  // The gradient of a cast is the gradient cast back. On grid inputs, with a step eps that is
  // also on the grid, x +- eps and 3 (x +- eps) are exact in float16 and bfloat16, so the
  // finite difference is exact and only the 16-bit rounding of the gradient itself remains.
  struct Case {
    const char* name;
    DType via;
    DType then;
    double step;
  };
  for (const Case& c : {Case{"float16", DType::kF16, DType::kF16, 1.0 / 256}, Case{"bfloat16", DType::kBF16, DType::kBF16, 1.0 / 64},
                        Case{"float16 -> bfloat16", DType::kF16, DType::kBF16, 1.0 / 64}}) {
    const auto f = [c](const std::vector<Tensor>& v) {
      return cast(cast(scale(cast(v[0], c.via), 3.0f), c.then), DType::kF32);
    };
    const GradcheckResult r = gradcheck(f, {grid({4, 5}, 54, 0.5, 1.0, c.step)}, {.eps = 4 * c.step});
    EXPECT_TRUE(r.ok) << c.name << ": " << r.message << " (max abs error " << r.max_abs_error << ")";
  }
}

TEST(Gradcheck, FusedConvolutionAndMaxPooling) {
  // conv2d_max_pool2d with its input, kernel and bias gradients ("same" padding, 2 channels,
  // 3x2 pool windows); inputs spread so that no window's maximum changes within the difference.
  const auto f = [](const std::vector<Tensor>& v) {
    return conv2d_max_pool2d(v[0], v[1], v[2], {.padding = {1, 1, 1, 1}, .activation = FusedActivation::kRelu},
                             {.pool_size = {3, 2}, .strides = {3, 2}});
  };
  const std::vector<Tensor> in{randn({2, 6, 5, 2}, 76, -2, 2), randn({3, 3, 2, 5}, 77), randn({5}, 78)};
  if (!conv2d_max_pool2d_supported(in[0], in[1], in[2], {.padding = {1, 1, 1, 1}}, {.pool_size = {3, 2}, .strides = {3, 2}}))
    GTEST_SKIP() << "no fused conv2d_max_pool2d kernel here (it needs AVX-512, and LOCKSTEP_CONV_ALGORITHM=direct leaves it out)";
  const GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.ok) << r.message << " (max abs error " << r.max_abs_error << ")";
}

TEST(Gradcheck, DetectsAWrongGradient) {
  // stop_gradient hides the dependency, so the analytic gradient is zero and must be caught.
  const GradcheckResult r = gradcheck([](auto& v) { return mul(stop_gradient(v[0]), v[0]); }, {randn({3}, 50)});
  EXPECT_FALSE(r.ok);
}

// d/dx sum(x) is 1 at every element, as TF's reduce_sum differentiates (the upstream gradient
// broadcast): a NaN or infinite element gets the upstream gradient, not NaN (x * 0 + g gave NaN
// there, and so the seed of a step's loss at a loss that is not finite), mean's too (g / count),
// over all elements or an axis; only a NaN upstream gradient makes it NaN.
TEST(Gradcheck, SumAndMeanGiveTheUpstreamGradientAtANanOrInfiniteElement) {
  const float kNan = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector(std::vector<float>{1.0f, kNan, kInf, -kInf, -2.0f, 0.5f}, {2, 3});
  const auto grad = [&](const std::function<Tensor(const Tensor&)>& f, const Tensor& upstream) {
    GradientTape tape;
    tape.watch(x);
    return tape.gradient(f(x), std::vector<Tensor>{x}, upstream)[0].to_vector<float>();
  };
  const Tensor one = Tensor::from_vector(std::vector<float>{1.0f}, Shape{});
  EXPECT_EQ(grad([](const Tensor& t) { return sum(t); }, one), std::vector<float>(6, 1.0f));
  EXPECT_EQ(grad([](const Tensor& t) { return mean(t); }, one), std::vector<float>(6, 1.0f / 6));
  const Tensor rows = Tensor::from_vector(std::vector<float>{2.0f, -3.0f}, {2});
  EXPECT_EQ(grad([](const Tensor& t) { return sum(t, 1); }, rows),
            (std::vector<float>{2.0f, 2.0f, 2.0f, -3.0f, -3.0f, -3.0f}));
  EXPECT_EQ(grad([](const Tensor& t) { return mean(t, 1); }, rows),
            (std::vector<float>{2.0f / 3, 2.0f / 3, 2.0f / 3, -1.0f, -1.0f, -1.0f}));
  const Tensor nan_rows = Tensor::from_vector(std::vector<float>{kNan, 1.0f}, {2});
  const std::vector<float> g = grad([](const Tensor& t) { return sum(t, 1); }, nan_rows);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(std::isnan(g[static_cast<std::size_t>(i)]), i < 3) << i;
}

TEST(Dropout, GradientIsTheMaskAndMaskIgnoresSplit) {
  Tensor x = Tensor::ones({8, 16});
  const DropoutKey key{.seed = 3, .stream = 1, .step = 5, .first_example = 0};
  Tensor whole = dropout(x, 0.5f, key);
  // The same rows computed as two halves with their global offsets give the same mask.
  Tensor top = dropout(x.slice(0, 3), 0.5f, key);
  Tensor bottom = dropout(x.slice(3, 8), 0.5f, {.seed = 3, .stream = 1, .step = 5, .first_example = 3});
  for (int i = 0; i < 3 * 16; ++i) EXPECT_EQ(whole.data<float>()[i], top.data<float>()[i]);
  for (int i = 0; i < 5 * 16; ++i) EXPECT_EQ(whole.data<float>()[3 * 16 + i], bottom.data<float>()[i]);
  int zeros = 0;
  for (float v : whole.to_vector<float>()) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 30);
  EXPECT_LT(zeros, 98);
  const GradcheckResult r = gradcheck([key](auto& v) { return dropout(v[0], 0.3f, key); }, {randn({4, 5}, 51)});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(GradientTape, VariablesAreWatchedAndUnusedSourcesGiveUndefined) {
  Variable w(Tensor::from_vector<float>({1, 2, 3}, {3}), "w");
  Variable unused(Tensor::zeros({2}), "u");
  GradientTape tape;
  Tensor y = sum(square(w.value()));
  auto g = tape.gradient(y, std::vector<Variable>{w, unused});
  ASSERT_TRUE(g[0].defined());
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_FALSE(g[1].defined());
  EXPECT_THROW(tape.gradient(y, std::vector<Variable>{w}), ValueError);
}
