// The sequence convnet layers (Conv1D, MaxPooling1D, AveragePooling1D, GlobalMaxPooling1D) and
// GlobalMaxPooling2D: forward values against a float64 reference computed here (every padding,
// strides, dilation, groups), Keras' shapes and parameter counts, where the global maximum's
// gradient goes, masks, their configs, and the errors for arguments and inputs they cannot take.
// Gradients against finite differences: layer_gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using test::message_of;

namespace {
std::vector<float> uniform_values(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(rng);
  return v;
}

void expect_close(const Tensor& got_t, const std::vector<double>& want, const std::string& what) {
  const auto got = got_t.to_vector<float>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " at " << i;
}

// Keras' padding before the steps and the output's length, by TensorFlow's documented rules.
struct Steps {
  std::int64_t before, out;
};
Steps steps_of(const std::string& padding, std::int64_t in, std::int64_t window, std::int64_t stride,
               std::int64_t dilation) {
  const std::int64_t span = (window - 1) * dilation + 1;
  if (padding == "valid") return {0, (in - span) / stride + 1};
  const std::int64_t out = (in + stride - 1) / stride;
  if (padding == "causal") return {span - 1, out};
  const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * stride + span - in);
  return {total / 2, out};
}

struct ConvCase {
  std::string padding;
  std::int64_t kernel, stride, dilation, groups;
};

// out[b, t, f] = bias[f] + sum over taps j and the group's channels c of
// x[b, t * stride + j * dilation - before, c] * kernel[j, c - group's first, f], zeros outside.
std::vector<double> conv1d_reference(const std::vector<float>& x, const Shape& xs, const std::vector<float>& k,
                                     const std::vector<float>& bias, std::int64_t filters, const ConvCase& c) {
  const std::int64_t n = xs[0], in = xs[1], ch = xs[2], cg = ch / c.groups, fg = filters / c.groups;
  const Steps st = steps_of(c.padding, in, c.kernel, c.stride, c.dilation);
  std::vector<double> y(static_cast<std::size_t>(n * st.out * filters));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t t = 0; t < st.out; ++t)
      for (std::int64_t f = 0; f < filters; ++f) {
        double acc = bias[static_cast<std::size_t>(f)];
        const std::int64_t g = f / fg;
        for (std::int64_t j = 0; j < c.kernel; ++j) {
          const std::int64_t s = t * c.stride + j * c.dilation - st.before;
          if (s < 0 || s >= in) continue;
          for (std::int64_t i = 0; i < cg; ++i)
            acc += static_cast<double>(x[static_cast<std::size_t>((b * in + s) * ch + g * cg + i)]) *
                   k[static_cast<std::size_t>((j * cg + i) * filters + f)];
        }
        y[static_cast<std::size_t>((b * st.out + t) * filters + f)] = acc;
      }
  return y;
}

// Windows of `pool` steps: the maximum of the steps inside, or their mean (padding excluded).
std::vector<double> pool1d_reference(bool max, const std::vector<float>& x, const Shape& xs, std::int64_t pool,
                                     std::int64_t stride, const std::string& padding) {
  const std::int64_t n = xs[0], in = xs[1], ch = xs[2];
  const Steps st = steps_of(padding, in, pool, stride, 1);
  std::vector<double> y;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t t = 0; t < st.out; ++t)
      for (std::int64_t c = 0; c < ch; ++c) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int count = 0;
        for (std::int64_t j = 0; j < pool; ++j) {
          const std::int64_t s = t * stride + j - st.before;
          if (s < 0 || s >= in) continue;
          const double v = x[static_cast<std::size_t>((b * in + s) * ch + c)];
          best = std::max(best, v);
          sum += v;
          ++count;
        }
        y.push_back(max ? best : sum / count);
      }
  return y;
}
}  // namespace

TEST(Conv1D, KerasTextClassifierShapesAndParamCounts) {
  // keras.io's "Text classification from scratch" summary (sequences of 500 tokens): two
  // Conv1D(128, 7, strides=3) of 114,816 parameters each, (None, 165, 128) then (None, 53, 128).
  auto c1 = layers::Conv1D(128, 7, "relu", "valid", 3);
  c1->build(Shape{-1, 500, 128}, 1);
  EXPECT_EQ(c1->compute_output_shape(Shape{-1, 500, 128}), (Shape{-1, 165, 128}));
  EXPECT_EQ(c1->count_params(), 114816);
  auto c2 = layers::Conv1D(128, 7, "relu", "valid", 3);
  c2->build(Shape{-1, 165, 128}, 2);
  EXPECT_EQ(c2->compute_output_shape(Shape{-1, 165, 128}), (Shape{-1, 53, 128}));
  EXPECT_EQ(dynamic_cast<layers::Conv1DLayer&>(*c2).kernel().shape(), (Shape{7, 128, 128}));  // Keras' (k, in, out)
  EXPECT_EQ(layers::GlobalMaxPooling1D()->compute_output_shape(Shape{-1, 53, 128}), (Shape{-1, 128}));
  EXPECT_EQ(layers::GlobalMaxPooling1D(true)->compute_output_shape(Shape{-1, 53, 128}), (Shape{-1, 1, 128}));
  // "same" and "causal" keep ceil(steps / strides) steps.
  EXPECT_EQ(layers::Conv1D(2, 4, "linear", "same", 2)->compute_output_shape(Shape{-1, 9, 3}), (Shape{-1, 5, 2}));
  EXPECT_EQ(layers::Conv1D(2, 4, "linear", "causal", 2)->compute_output_shape(Shape{-1, 9, 3}), (Shape{-1, 5, 2}));
}

TEST(Conv1D, EveryPaddingStrideDilationAndGroupingMatchesAFloat64Reference) {
  const std::vector<ConvCase> cases{{"valid", 3, 1, 1, 1}, {"valid", 4, 3, 1, 1}, {"valid", 3, 1, 2, 2},
                                    {"same", 3, 1, 1, 1},  {"same", 4, 2, 1, 1},  {"same", 3, 1, 3, 1},
                                    {"same", 2, 3, 1, 2},  {"causal", 3, 1, 1, 1}, {"causal", 4, 2, 1, 1},
                                    {"causal", 3, 1, 2, 2}, {"causal", 1, 1, 1, 1}};
  const Shape xs{3, 11, 4};
  const std::int64_t filters = 6;
  std::uint64_t seed = 1;
  for (const ConvCase& c : cases) {
    const std::string what = c.padding + " kernel " + std::to_string(c.kernel) + " strides " +
                             std::to_string(c.stride) + " dilation " + std::to_string(c.dilation) + " groups " +
                             std::to_string(c.groups);
    auto layer = layers::Conv1D({.filters = filters,
                                 .kernel_size = c.kernel,
                                 .strides = c.stride,
                                 .padding = c.padding,
                                 .dilation_rate = c.dilation,
                                 .groups = c.groups});
    layer->build(Shape{-1, xs[1], xs[2]}, 1);
    auto& conv = dynamic_cast<layers::Conv1DLayer&>(*layer);
    const auto x = uniform_values(xs.numel(), seed++), k = uniform_values(conv.kernel().shape().numel(), seed++),
               b = uniform_values(filters, seed++);
    conv.kernel().assign(Tensor::from_vector(k, conv.kernel().shape()));
    conv.bias().assign(Tensor::from_vector(b, {filters}));
    const std::vector<double> want = conv1d_reference(x, xs, k, b, filters, c);
    for (bool training : {false, true}) {
      const Tensor y = layer->call(Tensor::from_vector(x, xs), layers::CallContext{.training = training});
      EXPECT_EQ(y.shape(), layer->compute_output_shape(xs)) << what;
      expect_close(y, want, what);
    }
  }
}

TEST(Conv1D, ReluIsAppliedAndCausalOutputsReadNoLaterStep) {
  auto layer = layers::Conv1D({.filters = 1, .kernel_size = 2, .padding = "causal", .activation = "relu",
                               .kernel_initializer = "ones", .bias_initializer = "zeros"});
  layer->build(Shape{-1, 4, 1}, 0);
  // Output t = x[t - 1] + x[t] (x[-1] = 0), then ReLU: changing x[3] changes output 3 only.
  const auto y = layer->call(Tensor::from_vector<float>({1, -3, 2, 5}, {1, 4, 1}), {}).to_vector<float>();
  EXPECT_EQ(y, (std::vector<float>{1, 0, 0, 7}));
}

TEST(Pooling1D, MaxAndAverageMatchAFloat64ReferenceAndStridesDefaultToThePoolSize) {
  const Shape xs{2, 9, 3};
  const auto x = uniform_values(xs.numel(), 5);
  struct Case {
    std::int64_t pool;
    std::optional<std::int64_t> strides;
    std::string padding;
  };
  for (const Case& c : {Case{2, std::nullopt, "valid"}, Case{3, 2, "valid"}, Case{2, std::nullopt, "same"},
                        Case{3, 2, "same"}, Case{4, 1, "same"}}) {
    for (bool max : {true, false}) {
      const std::string what = std::string(max ? "MaxPooling1D " : "AveragePooling1D ") + c.padding + " pool " +
                               std::to_string(c.pool);
      auto layer = max ? layers::MaxPooling1D(c.pool, c.strides, c.padding)
                       : layers::AveragePooling1D(c.pool, c.strides, c.padding);
      const Tensor y = layer->call(Tensor::from_vector(x, xs), {});
      EXPECT_EQ(y.shape(), layer->compute_output_shape(xs)) << what;
      expect_close(y, pool1d_reference(max, x, xs, c.pool, c.strides.value_or(c.pool), c.padding), what);
    }
  }
  EXPECT_EQ(layers::MaxPooling1D()->compute_output_shape(Shape{-1, 7, 4}), (Shape{-1, 3, 4}));
}

TEST(GlobalMaxPooling, TakesEachFeaturesMaximumAndGivesItTheGradient) {
  // Steps (1, 5), (5, 2), (3, 5): the maxima are 5 and 5; feature 1's is tied at steps 0 and 2.
  const Tensor x = Tensor::from_vector<float>({1, 5, 5, 2, 3, 5}, {1, 3, 2});
  auto g1 = layers::GlobalMaxPooling1D();
  EXPECT_EQ(g1->call(x, {}).to_vector<float>(), (std::vector<float>{5, 5}));
  EXPECT_EQ(layers::GlobalMaxPooling1D(true)->call(x, {}).shape(), (Shape{1, 1, 2}));
  {
    GradientTape tape;
    tape.watch(x);
    const Tensor dx = tape.gradient(sum(g1->call(x, {})), std::vector<Tensor>{x})[0];
    // The first maximal step of each feature (TensorFlow's reduce_max would give feature 1's
    // steps 0 and 2 half each: see GlobalMaxPooling1DLayer).
    EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{0, 1, 1, 0, 0, 0}));
  }
  // 2D: the maximum over height and width of each channel.
  const Tensor image = Tensor::from_vector<float>({1, -1, 4, -2, 3, 0, 2, 7}, {1, 2, 2, 2});
  EXPECT_EQ(layers::GlobalMaxPooling2D()->call(image, {}).to_vector<float>(), (std::vector<float>{4, 7}));
  EXPECT_EQ(layers::GlobalMaxPooling2D(true)->call(image, {}).shape(), (Shape{1, 1, 1, 2}));
  EXPECT_EQ(layers::GlobalMaxPooling2D()->compute_output_shape(Shape{-1, 5, 3, 2}), (Shape{-1, 2}));
}

// Keras 3's Conv1D and GlobalMaxPooling1D do not support masking: a mask ends at them (the
// padding steps' rows count in the maximum).
TEST(GlobalMaxPooling, AMaskFromEmbeddingIsIgnoredAsKerasDoes) {
  Sequential seq({layers::Input(Shape{3}), layers::Embedding(4, 2, /*mask_zero=*/true), layers::GlobalMaxPooling1D()});
  seq.variables()[0].assign(Tensor::from_vector<float>({9, 8, 1, 2, 3, 0, 2, 5}, {4, 2}));
  // Row (1, 0, 0): steps (1, 2), (9, 8), (9, 8); the padding's (9, 8) is the maximum.
  EXPECT_EQ(seq.predict(Tensor::from_vector<float>({1, 0, 0, 3, 2, 1}, {2, 3})).to_vector<float>(),
            (std::vector<float>{9, 8, 3, 5}));
}

TEST(SequenceConvLayers, BadArgumentsAndInputsAreValueErrorsNamingThem) {
  const auto has = [](const std::string& message, const std::string& text) {
    return message.find(text) != std::string::npos;
  };
  EXPECT_TRUE(has(message_of([] { layers::Conv1D(4, 3, "linear", "full"); }), "unknown padding 'full'"));
  EXPECT_TRUE(has(message_of([] { layers::Conv2D(4, {3, 3}, "linear", "causal"); }), "for Conv1D only"));
  EXPECT_TRUE(has(message_of([] { layers::MaxPooling1D(2, std::nullopt, "causal"); }), "for Conv1D only"));
  EXPECT_TRUE(has(message_of([] { layers::Conv1D(0, 3); }), "filters must be positive"));
  EXPECT_TRUE(has(message_of([] { layers::Conv1D(4, 0); }), "kernel_size must be positive"));
  EXPECT_TRUE(has(message_of([] { layers::Conv1D({.filters = 2, .kernel_size = 3, .strides = 2, .dilation_rate = 2}); }),
                  "dilation_rate"));
  EXPECT_TRUE(has(message_of([] { layers::Conv1D({.filters = 3, .kernel_size = 3, .groups = 2}); }),
                  "multiple of groups"));
  EXPECT_TRUE(has(message_of([] { layers::MaxPooling1D(0); }), "pool_size must be positive"));
  auto conv = layers::Conv1D(4, 3);
  EXPECT_TRUE(has(message_of([&] { conv->build(Shape{-1, 5, 5, 1}, 0); }), "(batch, steps, channels)"));
  EXPECT_TRUE(has(message_of([&] { conv->build(Shape{-1, 2, 3}, 0); }), "does not fit the input"));
  auto grouped = layers::Conv1D({.filters = 4, .kernel_size = 1, .groups = 2});
  EXPECT_TRUE(has(message_of([&] { grouped->build(Shape{-1, 4, 3}, 0); }), "multiple of groups"));
  EXPECT_TRUE(has(message_of([] { layers::GlobalMaxPooling1D()->call(Tensor::ones({2, 3}), {}); }),
                  "(batch, steps, features)"));
  EXPECT_TRUE(has(message_of([] { layers::GlobalMaxPooling1D()->call(Tensor::ones({2, 0, 3}), {}); }), "no steps"));
  EXPECT_TRUE(has(message_of([] { layers::GlobalMaxPooling2D()->call(Tensor::ones({2, 3, 3}), {}); }),
                  "(batch, height, width, channels)"));
}

// Conv1D's and the 1D pooling layers' configs are Keras 3's get_config fields (those the .keras
// writer does not add: trainable, dtype, data_format, regularizers), a size as Keras' tuple of one,
// and from_config gives every option back, non-default ones included; Conv2D's and the 2D pooling
// layers' are the same fields with pairs (one list for both); Keras' plain int for a size is taken.
TEST(SequenceConvLayers, ConfigsAreKerasFieldsAndFromConfigGivesEveryOptionBack) {
  using nlohmann::json;
  const json conv1d = json::parse(R"({"name": "c", "filters": 6, "kernel_size": [3], "strides": [1],
      "padding": "causal", "dilation_rate": [2], "groups": 2, "activation": "relu", "use_bias": false,
      "kernel_initializer": "he_normal", "bias_initializer": "ones"})");
  const auto conv = layers::Conv1D({.filters = 6,
                                    .kernel_size = 3,
                                    .padding = "causal",
                                    .dilation_rate = 2,
                                    .groups = 2,
                                    .activation = "relu",
                                    .use_bias = false,
                                    .kernel_initializer = "he_normal",
                                    .bias_initializer = "ones",
                                    .name = "c"});
  EXPECT_EQ(conv->get_config(), conv1d);
  EXPECT_EQ(layers::Conv1DLayer::from_config(conv1d)->get_config(), conv1d);
  json plain = conv1d;
  plain["kernel_size"] = 3;
  plain["dilation_rate"] = 2;
  EXPECT_EQ(layers::Conv1DLayer::from_config(plain)->get_config(), conv1d);

  const json conv2d = json::parse(R"({"name": "c2", "filters": 4, "kernel_size": [3, 2], "strides": [2, 1],
      "padding": "same", "dilation_rate": [1, 1], "groups": 2, "activation": "tanh", "use_bias": true,
      "kernel_initializer": "glorot_normal", "bias_initializer": "zeros"})");
  EXPECT_EQ(layers::Conv2DLayer::from_config(conv2d)->get_config(), conv2d);

  // strides=None is the pool size, written as such (as Keras writes it).
  const json pool1d = json::parse(R"({"name": "p", "pool_size": [3], "strides": null, "padding": "same"})");
  json pooled = pool1d;
  pooled["strides"] = json::array({3});
  EXPECT_EQ(layers::Pooling1DLayer::from_config(true, pool1d)->get_config(), pooled);
  const json pool2d = json::parse(R"({"name": "p2", "pool_size": [2, 3], "strides": [1, 2], "padding": "valid"})");
  EXPECT_EQ(layers::Pooling2DLayer::from_config(false, pool2d)->get_config(), pool2d);

  json wrong = conv1d;
  wrong["kernel_size"] = json::array({3, 3});
  try {
    layers::Conv1DLayer::from_config(wrong);
    ADD_FAILURE() << "a Conv1D kernel_size of two numbers was taken";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Conv1D: argument kernel_size=[3,3] must be an integer or a list of 1 integer"),
              std::string::npos)
        << e.what();
  }
}
