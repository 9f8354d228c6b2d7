// Convolution and pooling layers: Keras' output shapes and parameter counts, values on small
// inputs worked out by hand, and the errors for inputs they cannot take.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/layers/sequence_layers.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using layers::Pair;
using test::message_of;

Tensor iota(const Shape& s, float scale = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * scale;
  return Tensor::from_vector(v, s);
}

TEST(Conv2D, KerasSimpleConvnetShapesAndParamCounts) {
  // keras.io's "simple MNIST convnet" summary: 320, 18,496 and 16,010 parameters.
  auto c1 = layers::Conv2D(32, {3, 3}, "relu");
  c1->build(Shape{-1, 28, 28, 1}, 1);
  EXPECT_EQ(c1->compute_output_shape(Shape{-1, 28, 28, 1}), (Shape{-1, 26, 26, 32}));
  EXPECT_EQ(c1->count_params(), 320);
  auto p1 = layers::MaxPooling2D({2, 2});
  EXPECT_EQ(p1->compute_output_shape(Shape{-1, 26, 26, 32}), (Shape{-1, 13, 13, 32}));
  auto c2 = layers::Conv2D(64, {3, 3}, "relu");
  c2->build(Shape{-1, 13, 13, 32}, 2);
  EXPECT_EQ(c2->compute_output_shape(Shape{-1, 13, 13, 32}), (Shape{-1, 11, 11, 64}));
  EXPECT_EQ(c2->count_params(), 18496);
  EXPECT_EQ(p1->compute_output_shape(Shape{-1, 11, 11, 64}), (Shape{-1, 5, 5, 64}));
  auto* conv = dynamic_cast<layers::Conv2DLayer*>(c2.get());
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->kernel().shape(), (Shape{3, 3, 32, 64}));  // Keras' HWIO
}

TEST(Conv2D, SamePaddingIsCeilOfInputOverStride) {
  auto c = layers::Conv2D(2, {3, 3}, "linear", "same", {2, 2});
  c->build(Shape{-1, 7, 6, 3}, 1);
  EXPECT_EQ(c->compute_output_shape(Shape{-1, 7, 6, 3}), (Shape{-1, 4, 3, 2}));
  EXPECT_EQ(c->call(Tensor::ones({2, 7, 6, 3}), CallContext{}).shape(), (Shape{2, 4, 3, 2}));
}

TEST(Conv2D, OnesKernelSumsEachWindowPlusBias) {
  auto c = layers::Conv2D({.filters = 1, .kernel_size = {2, 2}, .kernel_initializer = "ones", .bias_initializer = "ones"});
  c->build(Shape{-1, 3, 3, 1}, 0);
  // x = 0..8 in a 3x3 image: windows {0,1,3,4} = 8, {1,2,4,5} = 12, {3,4,6,7} = 20, {4,5,7,8} = 24.
  const auto y = c->call(iota({1, 3, 3, 1}), CallContext{}).to_vector<float>();
  EXPECT_EQ(y, (std::vector<float>{9, 13, 21, 25}));
}

TEST(DepthwiseConv2D, EachChannelHasItsOwnFiltersInKerasOrder) {
  auto d = layers::DepthwiseConv2D({.kernel_size = {1, 1}, .depth_multiplier = 2, .use_bias = false});
  d->build(Shape{-1, 1, 1, 2}, 0);
  EXPECT_EQ(d->count_params(), 4);
  auto* dw = dynamic_cast<layers::DepthwiseConv2DLayer*>(d.get());
  ASSERT_NE(dw, nullptr);
  ASSERT_EQ(dw->kernel().shape(), (Shape{1, 1, 2, 2}));
  dw->kernel().assign(Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2}));
  // Output channel c * multiplier + j = x[c] * kernel[c, j]: (5*1, 5*2, 7*3, 7*4).
  const auto y = d->call(Tensor::from_vector<float>({5, 7}, {1, 1, 1, 2}), CallContext{}).to_vector<float>();
  EXPECT_EQ(y, (std::vector<float>{5, 10, 21, 28}));
}

// Keras' separable_conv: out[i, j, f] = bias[f] + sum over (c, m) of pointwise[c * M + m, f] *
// depthwise(c, m)[i, j], depthwise(c, m)[i, j] = sum over the window of x[., ., c] * dk[., ., c, m].
TEST(SeparableConv2D, IsTheDepthwiseConvolutionThenThePointwiseOne) {
  constexpr std::int64_t H = 4, W = 5, C = 2, M = 2, F = 3, KH = 2, KW = 3;
  auto s = layers::SeparableConv2D({.filters = F, .kernel_size = {KH, KW}, .depth_multiplier = M});
  s->build(Shape{-1, H, W, C}, 0);
  auto* sep = dynamic_cast<layers::SeparableConv2DLayer*>(s.get());
  ASSERT_NE(sep, nullptr);
  // Keras' weights, in its order and shapes.
  ASSERT_EQ(s->variables().size(), 3u);
  EXPECT_TRUE(s->variables()[0].name().ends_with("/depthwise_kernel")) << s->variables()[0].name();
  EXPECT_TRUE(s->variables()[1].name().ends_with("/pointwise_kernel")) << s->variables()[1].name();
  EXPECT_TRUE(s->variables()[2].name().ends_with("/bias")) << s->variables()[2].name();
  EXPECT_EQ(sep->depthwise_kernel().shape(), (Shape{KH, KW, C, M}));
  EXPECT_EQ(sep->pointwise_kernel().shape(), (Shape{1, 1, C * M, F}));
  EXPECT_EQ(s->count_params(), KH * KW * C * M + C * M * F + F);
  const Tensor dk = iota({KH, KW, C, M}, 0.25f), pk = iota({1, 1, C * M, F}, -0.5f);
  sep->depthwise_kernel().assign(dk);
  sep->pointwise_kernel().assign(pk);
  sep->bias().assign(Tensor::from_vector<float>({1, 2, 3}, {F}));
  const Tensor x = iota({1, H, W, C}, 0.1f);
  const auto xv = x.to_vector<float>(), dv = dk.to_vector<float>(), pv = pk.to_vector<float>();
  const std::int64_t OH = H - KH + 1, OW = W - KW + 1;
  std::vector<float> want;
  for (std::int64_t i = 0; i < OH; ++i)
    for (std::int64_t j = 0; j < OW; ++j)
      for (std::int64_t f = 0; f < F; ++f) {
        double out = 1.0 + static_cast<double>(f);
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t m = 0; m < M; ++m) {
            double d = 0;
            for (std::int64_t a = 0; a < KH; ++a)
              for (std::int64_t b = 0; b < KW; ++b)
                d += xv[static_cast<std::size_t>(((i + a) * W + (j + b)) * C + c)] *
                     dv[static_cast<std::size_t>(((a * KW + b) * C + c) * M + m)];
            out += d * pv[static_cast<std::size_t>((c * M + m) * F + f)];
          }
        want.push_back(static_cast<float>(out));
      }
  const Tensor y = s->call(x, CallContext{});
  EXPECT_EQ(y.shape(), (Shape{1, OH, OW, F}));
  const auto got = y.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-4 * (1 + std::fabs(want[k]))) << k;
  // "same" with strides: Keras' output size ceil(input / stride).
  auto strided = layers::SeparableConv2D({.filters = 2, .kernel_size = {3, 3}, .strides = {2, 2}, .padding = "same"});
  EXPECT_EQ(strided->compute_output_shape(Shape{-1, 5, 6, 3}), (Shape{-1, 3, 3, 2}));
  EXPECT_NE(message_of([] { (void)layers::SeparableConv2D({.filters = 0, .kernel_size = {3, 3}}); }).find("filters"),
            std::string::npos);
}

TEST(Pooling2D, StridesDefaultToPoolSizeAndSameAverageExcludesPadding) {
  auto m = layers::MaxPooling2D({2, 2});
  const auto ym = m->call(iota({1, 3, 4, 1}), CallContext{}).to_vector<float>();
  EXPECT_EQ(ym, (std::vector<float>{5, 7}));  // valid: the last row is dropped
  auto a = layers::AveragePooling2D({2, 2}, std::nullopt, "same");
  EXPECT_EQ(a->compute_output_shape(Shape{-1, 3, 3, 1}), (Shape{-1, 2, 2, 1}));
  // 0..8 in 3x3, padded after: windows {0,1,3,4} -> 2, {2,5} -> 3.5, {6,7} -> 6.5, {8} -> 8.
  const auto ya = a->call(iota({1, 3, 3, 1}), CallContext{}).to_vector<float>();
  EXPECT_EQ(ya, (std::vector<float>{2, 3.5f, 6.5f, 8}));
}

TEST(GlobalAveragePooling2D, MeansOverHeightAndWidthPerChannel) {
  auto g = layers::GlobalAveragePooling2D();
  EXPECT_EQ(g->compute_output_shape(Shape{-1, 2, 2, 2}), (Shape{-1, 2}));
  // Channel 0 holds 0, 2, 4, 6 and channel 1 holds 1, 3, 5, 7.
  EXPECT_EQ(g->call(iota({1, 2, 2, 2}), CallContext{}).to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(layers::GlobalAveragePooling2D(true)->call(iota({1, 2, 2, 2}), CallContext{}).shape(),
            (Shape{1, 1, 1, 2}));
}

TEST(ZeroPadding2D, SurroundsWithZeros) {
  auto z = layers::ZeroPadding2D({Pair{1, 0}, Pair{0, 1}});
  EXPECT_EQ(z->compute_output_shape(Shape{-1, 1, 2, 1}), (Shape{-1, 2, 3, 1}));
  const auto y = z->call(Tensor::from_vector<float>({1, 2}, {1, 1, 2, 1}), CallContext{}).to_vector<float>();
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0, 1, 2, 0}));
}

TEST(Rescaling, ScalesThenOffsets) {
  auto r = layers::Rescaling(1.0f / 255.0f, -0.5f);
  const auto y = r->call(Tensor::from_vector<float>({0, 255}, {1, 2}), CallContext{}).to_vector<float>();
  EXPECT_FLOAT_EQ(y[0], -0.5f);
  EXPECT_FLOAT_EQ(y[1], 0.5f);
}

TEST(ConvLayers, BadArgumentsAndInputsAreValueErrorsNamingThem) {
  EXPECT_NE(message_of([] { layers::Conv2D(8, {3, 3}, "linear", "full"); }).find("unknown padding 'full'"),
            std::string::npos);
  EXPECT_NE(message_of([] { layers::Conv2D(0, {3, 3}); }).find("filters must be positive"), std::string::npos);
  EXPECT_NE(message_of([] {
              layers::Conv2D({.filters = 2, .kernel_size = {3, 3}, .strides = {2, 2}, .dilation_rate = {2, 2}});
            }).find("dilation_rate"),
            std::string::npos);
  auto c = layers::Conv2D(4, {3, 3});
  EXPECT_NE(message_of([&] { c->build(Shape{-1, 28, 28}, 0); }).find("(batch, height, width, channels)"),
            std::string::npos);
  EXPECT_NE(message_of([&] { c->build(Shape{-1, 2, 5, 1}, 0); }).find("does not fit the input"), std::string::npos);
  auto grouped = layers::Conv2D({.filters = 4, .kernel_size = {1, 1}, .groups = 2});
  EXPECT_NE(message_of([&] { grouped->build(Shape{-1, 4, 4, 3}, 0); }).find("multiple of groups"),
            std::string::npos);
  EXPECT_NE(message_of([] { layers::MaxPooling2D({0, 2}); }).find("pool_size must be positive"), std::string::npos);
}

// Under a mixed policy every convolution and pooling layer computes in the compute dtype, as
// Keras does (its inputs, kernel and bias cast to it, the variables float32): its output is
// 16-bit, what the float32 layer computes to that dtype's precision, and the kernel's gradient
// reaches the float32 variable.
TEST(ConvLayers, UnderMixedPoliciesOutputsAreSixteenBitAndMatchFloat32) {
  struct Make {
    const char* name;
    std::function<layers::LayerPtr()> make;
    Shape in{2, 7, 6, 3};  // images; sequences (2, 9, 3)
  };
  const Shape sequence{2, 9, 3};
  const std::vector<Make> makes{
      {"Conv2D", [] { return layers::Conv2D(6, {3, 3}, "relu", "same"); }},
      {"Conv2D strided", [] { return layers::Conv2D({.filters = 4, .kernel_size = {2, 2}, .strides = {2, 2}}); }},
      {"DepthwiseConv2D", [] { return layers::DepthwiseConv2D({.kernel_size = {3, 3}, .depth_multiplier = 2}); }},
      {"SeparableConv2D",
       [] { return layers::SeparableConv2D({.filters = 4, .kernel_size = {3, 3}, .padding = "same", .depth_multiplier = 2}); }},
      {"MaxPooling2D", [] { return layers::MaxPooling2D({2, 2}); }},
      {"AveragePooling2D", [] { return layers::AveragePooling2D({2, 2}, std::nullopt, "same"); }},
      {"GlobalAveragePooling2D", [] { return layers::GlobalAveragePooling2D(); }},
      {"ZeroPadding2D", [] { return layers::ZeroPadding2D({Pair{1, 1}, Pair{0, 2}}); }},
      {"GlobalMaxPooling2D", [] { return layers::GlobalMaxPooling2D(); }},
      {"Conv1D", [] { return layers::Conv1D(4, 3, "relu", "causal"); }, sequence},
      {"Conv1D strided", [] { return layers::Conv1D({.filters = 4, .kernel_size = 2, .strides = 2}); },
       sequence},
      {"MaxPooling1D", [] { return layers::MaxPooling1D(); }, sequence},
      {"AveragePooling1D", [] { return layers::AveragePooling1D(3, 2, "same"); }, sequence},
      {"GlobalMaxPooling1D", [] { return layers::GlobalMaxPooling1D(); }, sequence},
      // The decoder side.
      {"Conv2DTranspose", [] { return layers::Conv2DTranspose(4, {3, 3}, "relu", "same", {2, 2}); }},
      {"Conv2DTranspose output_padding",
       [] { return layers::Conv2DTranspose({.filters = 3, .kernel_size = {2, 3}, .strides = {3, 2}, .output_padding = Pair{1, 0}}); }},
      {"UpSampling2D", [] { return layers::UpSampling2D({2, 3}); }},
      {"UpSampling2D bilinear", [] { return layers::UpSampling2D({2, 2}, "bilinear"); }},
      {"Cropping2D", [] { return layers::Cropping2D({Pair{1, 2}, Pair{0, 1}}); }},
      {"UpSampling1D", [] { return layers::UpSampling1D(2); }, sequence},
      {"ZeroPadding1D", [] { return layers::ZeroPadding1D({1, 2}); }, sequence},
      // The rest of the 1D family.
      {"Conv1DTranspose",
       [] {
         return layers::Conv1DTranspose(
             {.filters = 3, .kernel_size = 3, .strides = 2, .padding = "same", .output_padding = 1});
       },
       sequence},
      {"DepthwiseConv1D",
       [] { return layers::DepthwiseConv1D({.kernel_size = 3, .padding = "same", .depth_multiplier = 2}); }, sequence},
      {"SeparableConv1D", [] { return layers::SeparableConv1D({.filters = 4, .kernel_size = 2, .strides = 2}); },
       sequence},
      {"Cropping1D", [] { return layers::Cropping1D({1, 2}); }, sequence}};
  for (const char* policy : {"mixed_float16", "mixed_bfloat16"}) {
    const mixed_precision::Policy p(policy);
    const double tol = p.compute_dtype() == DType::kBF16 ? 2e-2 : 2e-3;
    for (const Make& m : makes) {
      const Shape& in = m.in;
      const Tensor x = iota(in, 1.0f / 64.0f);  // float32, as a model's first layer receives it
      mixed_precision::set_global_policy(policy);
      auto mixed = m.make();
      mixed_precision::set_global_policy("float32");
      auto full = m.make();
      mixed->build(in, 7);
      full->build(in, 7);
      GradientTape tape;
      const Tensor y = mixed->call(x, CallContext{.training = true});
      EXPECT_EQ(y.dtype(), p.compute_dtype()) << m.name << " under " << policy;
      const auto got = y.to(DType::kF32).to_vector<float>(), want = full->call(x, CallContext{}).to_vector<float>();
      ASSERT_EQ(got.size(), want.size()) << m.name;
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << m.name << " under " << policy << " at " << i;
      if (mixed->trainable_variables().empty()) continue;
      const Variable kernel = mixed->trainable_variables()[0];
      EXPECT_EQ(kernel.value().dtype(), DType::kF32) << m.name;
      const Tensor g = tape.gradient(sum(cast(y, DType::kF32)), std::vector<Variable>{kernel})[0];
      ASSERT_TRUE(g.defined()) << m.name;
      EXPECT_EQ(g.dtype(), DType::kF32) << m.name;
      // An empty batch (a replica's share of a short last batch): an empty output, zero gradients.
      GradientTape empty_tape;
      std::vector<std::int64_t> no_examples = in.dims();
      no_examples[0] = 0;
      const Tensor none = mixed->call(Tensor::zeros(Shape(no_examples)), CallContext{.training = true});
      EXPECT_EQ(none.dim(0), 0) << m.name;
      const auto zero = empty_tape.gradient(sum(cast(none, DType::kF32)), std::vector<Variable>{kernel})[0];
      ASSERT_TRUE(zero.defined()) << m.name;
      for (float v : zero.to_vector<float>()) ASSERT_EQ(v, 0.0f) << m.name;
    }
  }
  mixed_precision::set_global_policy("float32");
}

}  // namespace
}  // namespace lockstep
