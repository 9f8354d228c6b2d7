// The rest of Keras 3's 1D convolution family: Conv1DTranspose against the transposed convolution's
// definition (each input step scatters kernel * value into the output) computed here, DepthwiseConv1D
// against a per-channel reference, SeparableConv1D against SeparableConv2D on the (N, 1, steps, C)
// view with the same weights, Cropping1D's values and gradient; Keras' output shapes, weights' names,
// shapes and order, its refusals, and configs in lockstep's and Keras' forms.
// Gradients against finite differences: layer_gradcheck_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

using layers::Pair;

Tensor random_tensor(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, s);
}

void expect_close(const Tensor& got_t, const std::vector<double>& want, const std::string& what) {
  const auto got = got_t.to_vector<float>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << what << " at " << i;
}

std::vector<std::string> weight_names(const layers::Layer& layer) {
  std::vector<std::string> names;
  for (const auto& v : layer.variables()) names.push_back(v.name().substr(v.name().rfind('/') + 1));
  return names;
}

// ---- Conv1DTranspose ----
struct TransposeCase {
  std::int64_t kernel, stride;
  std::string padding;
  std::optional<std::int64_t> output_padding;
  std::int64_t dilation;
  Shape input;  // (N, steps, C)
  std::int64_t filters;
};

// Keras' output length (backend_utils.py, _get_output_shape_given_tf_padding), restated.
std::int64_t keras_length(const TransposeCase& c) {
  const std::int64_t in = c.input[1], ke = (c.kernel - 1) * c.dilation + 1;
  if (c.padding == "valid") return (in - 1) * c.stride + ke + c.output_padding.value_or(std::max(ke, c.stride) - ke);
  return c.output_padding ? (in - 1) * c.stride + ke % 2 + *c.output_padding : in * c.stride;
}

// y[p] = bias + sum of x[i] * kernel[a] over i * stride + a * dilation - pad = p (tf.nn.conv_transpose),
// pad the left padding TensorFlow's "same" gives the convolution from y back to x (none for "valid").
std::vector<double> scatter_reference(const TransposeCase& c, const Tensor& x, const Tensor& kernel,
                                      const std::vector<float>& bias, std::int64_t out) {
  const std::int64_t n = c.input[0], in = c.input[1], ch = c.input[2], f = c.filters;
  const std::int64_t pad =
      c.padding == "valid" ? 0 : std::max<std::int64_t>((in - 1) * c.stride + (c.kernel - 1) * c.dilation + 1 - out, 0) / 2;
  const auto xv = x.to_vector<float>();
  const auto kv = kernel.to_vector<float>();
  std::vector<double> y(static_cast<std::size_t>(n * out * f), 0.0);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t a = 0; a < c.kernel; ++a) {
        const std::int64_t p = i * c.stride + a * c.dilation - pad;
        if (p < 0 || p >= out) continue;
        for (std::int64_t o = 0; o < f; ++o)
          for (std::int64_t k = 0; k < ch; ++k)
            y[static_cast<std::size_t>((b * out + p) * f + o)] +=
                static_cast<double>(xv[static_cast<std::size_t>((b * in + i) * ch + k)]) *
                kv[static_cast<std::size_t>((a * f + o) * ch + k)];
      }
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += bias[i % static_cast<std::size_t>(f)];
  return y;
}

TEST(Conv1DTranspose, MatchesTheScatterDefinitionForStridesPaddingsOutputPaddingsAndDilation) {
  const std::vector<TransposeCase> cases = {
      {3, 2, "same", std::nullopt, 1, Shape{2, 4, 3}, 2},  // keras.io's docstring layer, smaller
      {3, 1, "valid", std::nullopt, 1, Shape{1, 5, 2}, 3},
      {2, 3, "valid", std::nullopt, 1, Shape{2, 3, 1}, 2},  // stride > kernel: gaps
      {3, 2, "valid", 1, 1, Shape{2, 3, 2}, 3},
      {3, 2, "same", 1, 1, Shape{1, 4, 2}, 2},
      {4, 2, "same", std::nullopt, 1, Shape{2, 3, 2}, 1},  // even kernel, uneven padding
      {2, 2, "same", 1, 1, Shape{1, 3, 1}, 2},
      {3, 1, "same", std::nullopt, 3, Shape{2, 6, 2}, 2},  // dilated
      {2, 1, "valid", std::nullopt, 2, Shape{1, 4, 3}, 2},
      {1, 3, "valid", std::nullopt, 1, Shape{1, 2, 2}, 2},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const TransposeCase& c = cases[ci];
    auto layer = std::make_shared<layers::Conv1DTransposeLayer>(
        layers::Conv1DTransposeOptions{.filters = c.filters,
                                       .kernel_size = c.kernel,
                                       .strides = c.stride,
                                       .padding = c.padding,
                                       .output_padding = c.output_padding,
                                       .dilation_rate = c.dilation,
                                       .bias_initializer = "glorot_uniform"});
    layer->build(Shape{-1, c.input[1], c.input[2]}, 3 + ci);
    ASSERT_EQ(layer->kernel().shape(), (Shape{c.kernel, c.filters, c.input[2]})) << ci;  // Keras' (k, filters, in)
    const std::int64_t out = keras_length(c);
    const Tensor x = random_tensor(c.input, 10 + ci);
    const Tensor y = layer->call(x, {});
    ASSERT_EQ(y.shape(), (Shape{c.input[0], out, c.filters})) << "case " << ci;
    EXPECT_EQ(layer->compute_output_shape(Shape{-1, c.input[1], c.input[2]}), (Shape{-1, out, c.filters}));
    expect_close(y, scatter_reference(c, x, layer->kernel().value(), layer->bias().value().to_vector<float>(), out),
                 "case " + std::to_string(ci));
  }
}

TEST(Conv1DTranspose, KerasShapesAndItsRefusals) {
  const auto shape = [](layers::Conv1DTransposeOptions o, const Shape& in) {
    o.filters = 32;
    return layers::Conv1DTransposeLayer(o).compute_output_shape(in);
  };
  // Keras' docstring: Conv1DTranspose(32, 3, 2) on (4, 10, 128) is (4, 21, 32).
  EXPECT_EQ(shape({.kernel_size = 3, .strides = 2}, Shape{4, 10, 128}), (Shape{4, 21, 32}));
  EXPECT_EQ(shape({.kernel_size = 3, .strides = 2, .padding = "same"}, Shape{-1, 10, 8}), (Shape{-1, 20, 32}));
  EXPECT_EQ(shape({.kernel_size = 2, .strides = 3}, Shape{-1, 7, 8}), (Shape{-1, 21, 32}));  // max(kernel, stride)
  EXPECT_EQ(shape({.kernel_size = 3, .strides = 2, .output_padding = 1}, Shape{-1, 7, 8}), (Shape{-1, 16, 32}));
  EXPECT_EQ(shape({.kernel_size = 3, .strides = 2, .padding = "same"}, Shape{-1, -1, 8}), (Shape{-1, -1, 32}));
  EXPECT_VALUE_ERROR(shape({.kernel_size = 2, .strides = 2, .padding = "same", .output_padding = 0}, Shape{-1, 7, 8}),
                     "output_padding 0 gives 12 steps for 7 input ones");
  EXPECT_VALUE_ERROR(layers::Conv1DTranspose({.filters = 2, .kernel_size = 3, .strides = 2, .output_padding = 2}),
                     "Conv1DTranspose: output_padding must be at least 0 and less than strides (as in Keras), got "
                     "output_padding 2 and strides 2");
  EXPECT_VALUE_ERROR(layers::Conv1DTranspose({.filters = 2, .kernel_size = 3, .strides = 2, .dilation_rate = 2}),
                     "dilation_rate");
  EXPECT_VALUE_ERROR(layers::Conv1DTranspose(2, 3, "linear", "causal"), "causal' is for Conv1D only");
  EXPECT_VALUE_ERROR(layers::Conv1DTranspose(0, 3), "Conv1DTranspose: filters must be positive");
  auto image = layers::Conv1DTranspose(2, 3);
  EXPECT_VALUE_ERROR(image->build(Shape{-1, 4, 4, 2}, 1), "needs inputs of shape (batch, steps, channels)");
}

// ---- DepthwiseConv1D ----
struct WindowCase {
  std::string padding;
  std::int64_t kernel, stride, dilation, multiplier;
  Shape input;
};

std::int64_t pad_before(const WindowCase& c, std::int64_t out) {
  if (c.padding == "valid") return 0;
  const std::int64_t span = (c.kernel - 1) * c.dilation + 1;
  return std::max<std::int64_t>(0, (out - 1) * c.stride + span - c.input[1]) / 2;
}

std::int64_t window_out(const WindowCase& c) {
  const std::int64_t span = (c.kernel - 1) * c.dilation + 1;
  return c.padding == "valid" ? (c.input[1] - span) / c.stride + 1 : (c.input[1] + c.stride - 1) / c.stride;
}

// y[b, t, c * m + j] = bias[c * m + j] + sum over taps a of x[b, t * stride + a * dilation - before, c] * k[a, c, j].
std::vector<double> depthwise_reference(const WindowCase& c, const std::vector<float>& x, const std::vector<float>& k,
                                        const std::vector<float>& bias) {
  const std::int64_t n = c.input[0], in = c.input[1], ch = c.input[2], m = c.multiplier, out = window_out(c);
  const std::int64_t before = pad_before(c, out);
  std::vector<double> y(static_cast<std::size_t>(n * out * ch * m));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t t = 0; t < out; ++t)
      for (std::int64_t i = 0; i < ch; ++i)
        for (std::int64_t j = 0; j < m; ++j) {
          double acc = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(i * m + j)];
          for (std::int64_t a = 0; a < c.kernel; ++a) {
            const std::int64_t s = t * c.stride + a * c.dilation - before;
            if (s < 0 || s >= in) continue;
            acc += static_cast<double>(x[static_cast<std::size_t>((b * in + s) * ch + i)]) *
                   k[static_cast<std::size_t>((a * ch + i) * m + j)];
          }
          y[static_cast<std::size_t>(((b * out + t) * ch + i) * m + j)] = acc;
        }
  return y;
}

TEST(DepthwiseConv1D, EachChannelHasItsOwnFiltersForEveryPaddingStrideDilationAndMultiplier) {
  const std::vector<WindowCase> cases = {
      {"valid", 3, 1, 1, 1, Shape{2, 7, 3}}, {"same", 3, 2, 1, 2, Shape{2, 7, 3}}, {"same", 4, 1, 1, 3, Shape{1, 6, 2}},
      {"valid", 2, 1, 3, 2, Shape{2, 8, 2}}, {"same", 3, 1, 2, 1, Shape{1, 5, 4}}, {"valid", 2, 3, 1, 1, Shape{2, 8, 1}},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const WindowCase& c = cases[ci];
    auto layer = std::make_shared<layers::DepthwiseConv1DLayer>(
        layers::DepthwiseConv1DOptions{.kernel_size = c.kernel,
                                       .strides = c.stride,
                                       .padding = c.padding,
                                       .depth_multiplier = c.multiplier,
                                       .dilation_rate = c.dilation,
                                       .use_bias = ci % 2 == 0,
                                       .bias_initializer = "glorot_uniform"});
    layer->build(Shape{-1, c.input[1], c.input[2]}, 20 + ci);
    EXPECT_EQ(layer->kernel().shape(), (Shape{c.kernel, c.input[2], c.multiplier}));
    EXPECT_EQ(layer->count_params(), c.kernel * c.input[2] * c.multiplier + (ci % 2 == 0 ? c.input[2] * c.multiplier : 0));
    const Tensor x = random_tensor(c.input, 30 + ci);
    const Tensor y = layer->call(x, {});
    ASSERT_EQ(y.shape(), (Shape{c.input[0], window_out(c), c.input[2] * c.multiplier})) << ci;
    EXPECT_EQ(layer->compute_output_shape(Shape{-1, c.input[1], c.input[2]}),
              (Shape{-1, window_out(c), c.input[2] * c.multiplier}));
    const std::vector<float> bias = layer->bias().defined() ? layer->bias().value().to_vector<float>() : std::vector<float>{};
    expect_close(y, depthwise_reference(c, x.to_vector<float>(), layer->kernel().value().to_vector<float>(), bias),
                 "case " + std::to_string(ci));
  }
  auto named = layers::DepthwiseConv1D({.kernel_size = 2});
  named->build(Shape{-1, 4, 2}, 1);
  EXPECT_EQ(weight_names(*named), (std::vector<std::string>{"kernel", "bias"}));  // Keras' names and order
  EXPECT_VALUE_ERROR(layers::DepthwiseConv1D({.kernel_size = 3, .padding = "causal"}), "causal");
  EXPECT_VALUE_ERROR(layers::DepthwiseConv1D({.kernel_size = 3, .depth_multiplier = 0}),
                     "DepthwiseConv1D: depth_multiplier must be positive, got 0");
  EXPECT_VALUE_ERROR(layers::DepthwiseConv1D({.kernel_size = 3, .strides = 2, .dilation_rate = 2}),
                     "strides > 1 are not supported together with dilation_rate > 1");
  EXPECT_VALUE_ERROR(layers::DepthwiseConv1DLayer({.kernel_size = 5}).compute_output_shape(Shape{-1, 4, 2}),
                     "does not fit the input");
}

// ---- SeparableConv1D ----
TEST(SeparableConv1D, IsSeparableConv2DOnTheOneRowImageWithKerasWeights) {
  struct Case {
    std::string padding, activation;
    std::int64_t kernel, stride, dilation, multiplier, filters;
    bool use_bias;
    Shape input;
  };
  const std::vector<Case> cases = {
      {"valid", "linear", 3, 1, 1, 1, 4, true, Shape{2, 7, 3}},
      {"same", "relu", 3, 2, 1, 2, 3, true, Shape{2, 7, 3}},
      {"same", "tanh", 2, 1, 2, 3, 2, false, Shape{1, 6, 2}},
      {"valid", "linear", 4, 3, 1, 1, 5, true, Shape{2, 10, 1}},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    const std::int64_t ch = c.input[2];
    auto sep1 = std::make_shared<layers::SeparableConv1DLayer>(layers::SeparableConv1DOptions{
        .filters = c.filters, .kernel_size = c.kernel, .strides = c.stride, .padding = c.padding,
        .depth_multiplier = c.multiplier, .dilation_rate = c.dilation, .activation = c.activation,
        .use_bias = c.use_bias, .bias_initializer = "glorot_uniform"});
    sep1->build(Shape{-1, c.input[1], ch}, 40 + ci);
    // Keras' order, names and shapes.
    const std::vector<std::string> names = c.use_bias
                                               ? std::vector<std::string>{"depthwise_kernel", "pointwise_kernel", "bias"}
                                               : std::vector<std::string>{"depthwise_kernel", "pointwise_kernel"};
    EXPECT_EQ(weight_names(*sep1), names);
    EXPECT_EQ(sep1->depthwise_kernel().shape(), (Shape{c.kernel, ch, c.multiplier}));
    EXPECT_EQ(sep1->pointwise_kernel().shape(), (Shape{1, ch * c.multiplier, c.filters}));
    auto sep2 = std::make_shared<layers::SeparableConv2DLayer>(layers::SeparableConv2DOptions{
        .filters = c.filters, .kernel_size = {1, c.kernel}, .strides = {1, c.stride}, .padding = c.padding,
        .depth_multiplier = c.multiplier, .dilation_rate = {1, c.dilation}, .activation = c.activation,
        .use_bias = c.use_bias});
    sep2->build(Shape{-1, 1, c.input[1], ch}, 1);
    const auto vars1 = sep1->variables(), vars2 = sep2->variables();
    ASSERT_EQ(vars1.size(), vars2.size());
    for (std::size_t i = 0; i < vars1.size(); ++i) vars2[i].assign(vars1[i].value().reshape(vars2[i].shape()));
    const Tensor x = random_tensor(c.input, 50 + ci);
    const Tensor y = sep1->call(x, {});
    const Tensor want = sep2->call(x.reshape(Shape{c.input[0], 1, c.input[1], ch}), {});
    ASSERT_EQ(y.shape(), (Shape{c.input[0], want.dim(2), c.filters})) << ci;
    EXPECT_EQ(sep1->compute_output_shape(Shape{-1, c.input[1], ch}), (Shape{-1, want.dim(2), c.filters}));
    EXPECT_EQ(y.to_vector<float>(), want.to_vector<float>()) << "case " << ci;  // the same ops on the same numbers
  }
  // A hand-computed one: x (1, 3, 1), kernel 2, multiplier 1, one filter.
  auto sep = std::make_shared<layers::SeparableConv1DLayer>(layers::SeparableConv1DOptions{.filters = 1, .kernel_size = 2});
  sep->build(Shape{-1, 3, 1}, 1);
  sep->depthwise_kernel().assign(Tensor::from_vector(std::vector<float>{2, 3}, Shape{2, 1, 1}));
  sep->pointwise_kernel().assign(Tensor::from_vector(std::vector<float>{10}, Shape{1, 1, 1}));
  sep->bias().assign(Tensor::from_vector(std::vector<float>{1}, Shape{1}));
  // (2 * 1 + 3 * 2) * 10 + 1, (2 * 2 + 3 * 4) * 10 + 1.
  EXPECT_EQ(sep->call(Tensor::from_vector(std::vector<float>{1, 2, 4}, Shape{1, 3, 1}), {}).to_vector<float>(),
            (std::vector<float>{81, 161}));
  EXPECT_VALUE_ERROR(layers::SeparableConv1D({.filters = 2, .kernel_size = 3, .padding = "causal"}), "causal");
  EXPECT_VALUE_ERROR(layers::SeparableConv1D({.filters = 0, .kernel_size = 3}), "SeparableConv1D: filters must be positive");
}

// ---- Cropping1D ----
// d sum(w * layer(x)) / dx through the tape.
Tensor input_gradient(const layers::Layer& layer, const Tensor& x, const Tensor& w) {
  GradientTape tape;
  tape.watch(x);
  const Tensor y = layer.call(x, {});
  return tape.gradient(sum(mul(y, w)), std::vector<Tensor>{x})[0];
}

TEST(Cropping1D, CutsTheStepsAndItsGradientIsZeroThere) {
  auto layer = layers::Cropping1D({1, 2});
  EXPECT_EQ(layer->compute_output_shape(Shape{-1, 5, 2}), (Shape{-1, 2, 2}));
  EXPECT_EQ(layer->compute_output_shape(Shape{-1, -1, 2}), (Shape{-1, -1, 2}));
  std::vector<float> v(10);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor x = Tensor::from_vector(v, Shape{1, 5, 2});
  EXPECT_EQ(layer->call(x, {}).to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{1, 2, 2});
  EXPECT_EQ(input_gradient(*layer, x, w).to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0, 0, 0}));
  // Keras' default (1, 1), and (0, 0) keeps every step.
  EXPECT_EQ(layers::Cropping1D()->call(x, {}).to_vector<float>(), (std::vector<float>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(layers::Cropping1D({0, 0})->call(x, {}).to_vector<float>(), v);
  EXPECT_VALUE_ERROR(layer->compute_output_shape(Shape{-1, 3, 2}), "cropping (1, 2) leaves nothing of the input's 3 steps");
  EXPECT_VALUE_ERROR(layers::Cropping1D({-1, 0}), "Cropping1D: cropping must not be negative");
  // A replica's empty share of a batch keeps the tape's path to the input.
  auto conv = layers::Conv1D(2, 1);
  conv->build(Shape{0, 5, 3}, 1);
  const Variable kernel = conv->trainable_variables()[0];
  GradientTape tape;
  const Tensor y = layer->call(conv->call(Tensor::zeros(Shape{0, 5, 3}), {}), {});
  EXPECT_EQ(y.shape(), (Shape{0, 2, 2}));
  const Tensor g = tape.gradient(sum(y), std::vector<Variable>{kernel})[0];
  ASSERT_TRUE(g.defined());
}

// ---- configs ----
TEST(Conv1DFamily, ConfigsRoundTripThroughTheRegistryAndReadKerasForms) {
  const std::vector<layers::LayerPtr> made = {
      layers::Conv1DTranspose({.filters = 4, .kernel_size = 3, .strides = 2, .padding = "same", .output_padding = 1,
                               .activation = "relu", .use_bias = false, .kernel_initializer = "he_normal"}),
      layers::Conv1DTranspose(2, 3),
      layers::DepthwiseConv1D({.kernel_size = 3, .strides = 2, .padding = "same", .depth_multiplier = 2,
                               .activation = "celu", .depthwise_initializer = "ones"}),
      layers::SeparableConv1D({.filters = 3, .kernel_size = 2, .depth_multiplier = 3, .dilation_rate = 2,
                               .activation = "squareplus", .pointwise_initializer = "he_uniform"}),
      layers::Cropping1D({2, 0})};
  for (const auto& layer : made) {
    const nlohmann::json c = layer->get_config();
    const auto cls = layers::find_layer_class(layer->class_name());
    ASSERT_TRUE(cls) << layer->class_name();
    EXPECT_EQ(cls->from_config(c)->get_config(), c) << layer->class_name();
  }
  // Keras writes a 1D size as a list of one and null for no output_padding.
  const nlohmann::json t = made[0]->get_config();
  EXPECT_EQ(t.at("kernel_size"), nlohmann::json::array({3}));
  EXPECT_EQ(t.at("output_padding"), nlohmann::json::array({1}));
  EXPECT_TRUE(made[1]->get_config().at("output_padding").is_null());
  EXPECT_EQ(made[4]->get_config().at("cropping"), nlohmann::json::array({2, 0}));
  // ... and takes an int for a size, and for Cropping1D's (c, c).
  nlohmann::json k = t;
  k["kernel_size"] = 5;
  k["strides"] = 1;
  k["output_padding"] = 0;
  const auto again = std::dynamic_pointer_cast<layers::Conv1DTransposeLayer>(layers::Conv1DTransposeLayer::from_config(k));
  EXPECT_EQ(again->options().kernel_size, 5);
  EXPECT_EQ(again->options().output_padding, std::optional<std::int64_t>(0));
  nlohmann::json crop = made[4]->get_config();
  crop["cropping"] = 3;
  EXPECT_EQ(std::dynamic_pointer_cast<layers::Cropping1DLayer>(layers::Cropping1DLayer::from_config(crop))->cropping(),
            (Pair{3, 3}));
  nlohmann::json two = t;
  two["kernel_size"] = nlohmann::json::array({3, 3});
  try {
    (void)layers::Conv1DTransposeLayer::from_config(two);
    ADD_FAILURE() << "a kernel_size of two integers was taken";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Conv1DTranspose: argument kernel_size=[3,3] must be an integer or a list of 1 integer"),
              std::string::npos)
        << e.what();
  }
}

// A sequence decoder of the family trains: Conv1D down, Conv1DTranspose back up, SeparableConv1D,
// DepthwiseConv1D and Cropping1D, mean squared error against its input.
TEST(Conv1DFamily, ASequenceAutoencoderLearns) {
  constexpr std::int64_t n = 64, steps = 12;
  std::vector<float> v(static_cast<std::size_t>(n * steps * 2));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t t = 0; t < steps; ++t) {
      v[static_cast<std::size_t>((b * steps + t) * 2)] = std::sin(0.5f * static_cast<float>(t + b % 5));
      v[static_cast<std::size_t>((b * steps + t) * 2 + 1)] = std::cos(0.3f * static_cast<float>(t * (1 + b % 3)));
    }
  const Tensor x = Tensor::from_vector(v, Shape{n, steps, 2});
  set_random_seed(3);
  Sequential m({layers::Input({steps, 2}), layers::Conv1D(8, 3, "relu", "same", 2),
                layers::Conv1DTranspose(8, 3, "relu", "same", 2),
                layers::SeparableConv1D({.filters = 8, .kernel_size = 3, .padding = "same", .depth_multiplier = 2,
                                         .activation = "tanh"}),
                layers::ZeroPadding1D({1, 1}), layers::DepthwiseConv1D({.kernel_size = 3}),
                layers::Cropping1D({0, 0}), layers::Conv1D(2, 1)});
  EXPECT_EQ(m.output_shape(), (Shape{-1, steps, 2}));
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  const History h = m.fit(x, x, {.epochs = 20, .batch_size = 16, .verbose = 0});
  const auto& loss = h.history.at("loss");
  EXPECT_LT(loss.back(), 0.3 * loss.front()) << loss.front() << " -> " << loss.back();
}

}  // namespace
}  // namespace lockstep
