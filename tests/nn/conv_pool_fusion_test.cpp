// A Conv2D whose only reader is a MaxPooling2D runs as one fused op (conv2d_max_pool2d) in
// Sequential and Functional models, where the backend has the kernel; the results and the
// gradients must be those of the two layers called one after the other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

// The op types recorded while it is installed (every op is offered to it).
class OpLog : public OpRecorder {
 public:
  OpLog() : previous_(set_current_recorder(this)) {}
  ~OpLog() override { set_current_recorder(previous_); }
  OpLog(const OpLog&) = delete;
  OpLog& operator=(const OpLog&) = delete;
  bool wants(const Tensor* const*, int) const override { return true; }
  void record(const OpRecord& r) override { types.push_back(r.type); }
  std::size_t count(OpType t) const { return static_cast<std::size_t>(std::count(types.begin(), types.end(), t)); }
  std::vector<OpType> types;

 private:
  OpRecorder* previous_;
};

// |got - want| <= 1e-5 * max |want| (+ a tiny floor), elementwise; the two sum in other orders.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  float scale = 1e-6f;
  for (float v : w) scale = std::max(scale, std::fabs(v));
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) bad += !(std::fabs(g[i] - w[i]) <= 1e-5f * scale);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << g.size() << " elements differ by more than 1e-5 * " << scale;
}

// Each layer's call() in turn: the unfused reference, with the same variables.
Tensor layer_by_layer(const std::vector<layers::LayerPtr>& ls, Tensor h) {
  for (const auto& l : ls) h = l->call(h, {});
  return h;
}

constexpr const char* kNoFusedKernel =
    "no fused conv2d_max_pool2d kernel here (it needs AVX-512, and LOCKSTEP_CONV_ALGORITHM=direct leaves it out)";
bool fused_kernel_here() {
  const Tensor x = Tensor::zeros({1, 4, 4, 1}), k = Tensor::zeros({3, 3, 1, 2});
  return conv2d_max_pool2d_supported(x, k, Tensor(), {}, {});
}

// model(x), checking how many ops of each type its forward pass recorded.
Tensor forward_counting(const Model& model, const Tensor& x, const std::vector<std::pair<OpType, std::size_t>>& expected) {
  OpLog log;
  Tensor y = model(x);
  for (const auto& [type, n] : expected) EXPECT_EQ(log.count(type), n) << op_name(type);
  return y;
}

TEST(ConvPoolFusion, SequentialFusesTheFirstConvolutionWithItsPoolingAndComputesTheSame) {
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  set_random_seed(7);
  // The first Conv2D (3x3 over 1 channel: 9 taps) is fused with its pooling; the second (3x3
  // over 8 channels: 72 taps) is not, and the last MaxPooling2D feeds Flatten as usual.
  const std::vector<layers::LayerPtr> ls{layers::Conv2D(8, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
                                         layers::Conv2D(6, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
                                         layers::Flatten(),                  layers::Dense(3)};
  Sequential model(ls);
  model.build(Shape{-1, 14, 14, 1});
  const Tensor x = test::random_uniform({5, 14, 14, 1}, 1);
  const Tensor y = forward_counting(model, x, {{OpType::kConv2dMaxPool2d, 1}, {OpType::kConv2d, 1}, {OpType::kMaxPool2d, 1}});
  expect_close(y, layer_by_layer(ls, x), "output");

  // The gradient of every variable, through the fused op's backward.
  const Tensor r = test::random_uniform(y.shape(), 2);
  const auto vars = model.variables();
  const auto grads = [&](bool fused) {
    GradientTape tape;
    const Tensor out = fused ? model(x) : layer_by_layer(ls, x);
    return tape.gradient(sum(mul(out, r)), vars);
  };
  const auto got = grads(true), want = grads(false);
  for (std::size_t i = 0; i < vars.size(); ++i) expect_close(got[i], want[i], vars[i].name());
}

TEST(ConvPoolFusion, LinearActivationAndSamePaddingAreFusedToo) {
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  set_random_seed(8);
  // 3 input channels, 20 filters (a partial block of 16), an odd 9x11 output pooled 2x2.
  const std::vector<layers::LayerPtr> ls{layers::Conv2D(20, {3, 3}, "linear", "same"), layers::MaxPooling2D({2, 2}),
                                         layers::Flatten(), layers::Dense(2)};
  Sequential model(ls);
  model.build(Shape{-1, 9, 11, 3});
  const Tensor x = test::random_uniform({4, 9, 11, 3}, 3);
  const Tensor y = forward_counting(model, x, {{OpType::kConv2dMaxPool2d, 1}});
  expect_close(y, layer_by_layer(ls, x), "output");
}

TEST(ConvPoolFusion, FunctionalFusesAConvolutionOnlyWhereThePoolingIsItsOnlyReader) {
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  set_random_seed(9);
  // a -> MaxPooling2D alone (fused); b -> MaxPooling2D and AveragePooling2D (not fused: b's
  // output is needed twice).
  const auto conv_a = layers::Conv2D(4, {3, 3}, "relu"), conv_b = layers::Conv2D(4, {3, 3}, "relu");
  const auto pool_a = layers::MaxPooling2D({2, 2}), pool_b = layers::MaxPooling2D({2, 2});
  const auto avg_b = layers::AveragePooling2D({2, 2});
  const auto add = layers::Add(), flatten = layers::Flatten(), dense = layers::Dense(2);
  const KerasTensor in = Input({10, 10, 1});
  const KerasTensor a = call(conv_a, in), b = call(conv_b, in);
  const KerasTensor merged = call(add, {call(pool_a, a), call(pool_b, b), call(avg_b, b)});
  Functional model(in, call(dense, call(flatten, merged)));
  const Tensor x = test::random_uniform({3, 10, 10, 1}, 4);
  const Tensor y = forward_counting(model, x, {{OpType::kConv2dMaxPool2d, 1}, {OpType::kConv2d, 1}});
  const Tensor ya = pool_a->call(conv_a->call(x, {}), {});
  const Tensor bx = conv_b->call(x, {});
  const auto* merge = dynamic_cast<const layers::MergeLayer*>(add.get());
  ASSERT_NE(merge, nullptr);
  const Tensor m = merge->merge({ya, pool_b->call(bx, {}), avg_b->call(bx, {})}, {});
  expect_close(y, dense->call(flatten->call(m, {}), {}), "output");
}

TEST(ConvPoolFusion, AnEmptyBatchGivesAnEmptyOutputAndZeroGradients) {
  // A replica whose slice of an uneven global batch is empty.
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  const Tensor x = Tensor::zeros({0, 8, 8, 1});
  const Tensor k = test::random_uniform({3, 3, 1, 4}, 5), b = test::random_uniform({4}, 6);
  GradientTape tape;
  tape.watch(k);
  tape.watch(b);
  const Tensor y = conv2d_max_pool2d(x, k, b, {.activation = FusedActivation::kRelu}, {});
  EXPECT_EQ(y.shape(), (Shape{0, 3, 3, 4}));
  const auto g = tape.gradient(sum(y), std::vector<Tensor>{k, b});
  for (const Tensor& t : g) {
    ASSERT_TRUE(t.defined());
    for (float v : t.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  }
}

// got and want are NaN at the same elements, and close (expect_close's bound) at the others.
void expect_close_nan_alike(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.to_vector<float>();
  float scale = 1e-6f;
  for (float v : w) scale = std::isnan(v) ? scale : std::max(scale, std::fabs(v));
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i << ": " << g[i] << ", not NaN";
    else EXPECT_LE(std::fabs(g[i] - w[i]), 1e-5f * scale) << what << " element " << i << ": " << g[i] << ", " << w[i];
  }
}

TEST(ConvPoolFusion, AWindowWhoseMaximumIsNanSendsItsGradientToTheNanFusedOrNot) {
  // A window whose maximum is NaN sends its gradient to its first NaN on both paths (the unfused
  // max pooling sent it to no element, the fused kernel to the NaN's index). A 1x1 convolution
  // keeps each NaN of x at its place: last in window (0, 0), second in window (1, 1).
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xv = test::random_uniform({2, 4, 4, 1}, 11).to_vector<float>();
  xv[1 * 4 + 1] = kNan;
  xv[2 * 4 + 3] = kNan;
  const Tensor x = Tensor::from_vector(xv, {2, 4, 4, 1});
  const Tensor k = Tensor::from_vector(std::vector<float>{1.5f, -0.5f}, {1, 1, 1, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{0.25f, -1.0f}, {2});
  const Tensor r = test::random_uniform({2, 2, 2, 2}, 12);
  const auto grads = [&](bool fused) {
    GradientTape tape;
    for (const Tensor& t : {x, k, b}) tape.watch(t);
    const Tensor y = fused ? conv2d_max_pool2d(x, k, b, {}, {}) : max_pool2d(conv2d(x, k, b, {}), {});
    // r as y's gradient.
    return tape.gradient(y, std::vector<Tensor>{x, k, b}, r);
  };
  const auto got = grads(true), want = grads(false);
  const char* names[] = {"dx", "dkernel", "dbias"};
  for (std::size_t i = 0; i < got.size(); ++i) expect_close_nan_alike(got[i], want[i], names[i]);
  // Each NaN of x got its window's gradient through the convolution: r's times the kernel's.
  const auto dx = want[0].to_vector<float>(), rv = r.to_vector<float>();
  EXPECT_FLOAT_EQ(dx[1 * 4 + 1], rv[0] * 1.5f + rv[1] * -0.5f);
  EXPECT_FLOAT_EQ(dx[2 * 4 + 3], rv[(1 * 2 + 1) * 2] * 1.5f + rv[(1 * 2 + 1) * 2 + 1] * -0.5f);
}

TEST(ConvPoolFusion, TheFusedReluOfNegativeZeroIsPositiveZeroAsTheUnfusedOps) {
  // Convolutions of -0 (zeros times a negative weight, plus a bias of -0): the ReLU gives +0 on
  // both paths (kernels.hpp's relu_of), bit for bit; the fused kernel's `< 0` kept -0.
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  const Tensor x = Tensor::zeros({2, 4, 4, 1});
  const Tensor k = Tensor::from_vector(std::vector<float>{-1.0f, -2.0f}, {1, 1, 1, 2});
  const Tensor b = Tensor::from_vector(std::vector<float>{-0.0f, -0.0f}, {2});
  const Conv2dOptions relu{.activation = FusedActivation::kRelu};
  for (const bool fused : {true, false}) {
    const Tensor y = fused ? conv2d_max_pool2d(x, k, b, relu, {}) : max_pool2d(conv2d(x, k, b, relu), {});
    for (float v : y.to_vector<float>())
      EXPECT_TRUE(v == 0.0f && !std::signbit(v)) << (fused ? "fused" : "unfused") << ": " << v;
  }
}

TEST(ConvPoolFusion, TheOpRefusesWhatItsKernelDoesNotTakeAndSaysWhy) {
  if (!fused_kernel_here()) GTEST_SKIP() << kNoFusedKernel;
  const Tensor x = Tensor::zeros({2, 8, 8, 4}), k = Tensor::zeros({3, 3, 4, 8});  // 36 taps
  EXPECT_FALSE(conv2d_max_pool2d_supported(x, k, Tensor(), {}, {}));
  try {
    (void)conv2d_max_pool2d(x, k, Tensor(), {}, {});
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel height * width * channels <= 32"), std::string::npos) << e.what();
  }
  // Its gradient function checks the same rule (the kernel behind it trusts the shapes).
  const Tensor y = Tensor::zeros({2, 3, 3, 8}), arg = Tensor::zeros({2, 3, 3, 8}, DType::kU8);
  EXPECT_THROW((void)conv2d_max_pool2d_grad(x, k, false, y, arg, y, {}, {2, 2}, {true, true, false}), ValueError);
  // Overlapping pool windows, strides, a shape conv2d itself rejects: not fused either.
  const Tensor k1 = Tensor::zeros({3, 3, 1, 2});                          // 9 taps on 1 channel...
  EXPECT_FALSE(conv2d_max_pool2d_supported(x, k1, Tensor(), {}, {}));  // ...do not match x's 4 channels
  const Tensor x1 = Tensor::zeros({2, 8, 8, 1}), k9 = Tensor::zeros({3, 3, 1, 8});
  EXPECT_TRUE(conv2d_max_pool2d_supported(x1, k9, Tensor(), {}, {}));
  EXPECT_FALSE(conv2d_max_pool2d_supported(x1, k9, Tensor(), {}, {.pool_size = {3, 3}, .strides = {2, 2}}));
  EXPECT_FALSE(conv2d_max_pool2d_supported(x1, k9, Tensor(), {.strides = {2, 2}}, {}));
  // 16-bit tensors take the float32 kernel, widened by the op (mixed precision).
  EXPECT_TRUE(conv2d_max_pool2d_supported(cast(x1, DType::kBF16), cast(k9, DType::kBF16), Tensor(), {}, {}));
}

}  // namespace
}  // namespace lockstep
