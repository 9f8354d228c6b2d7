// The decoder side of autoencoders and U-Nets: Conv2DTranspose against the transposed
// convolution's definition (each input pixel scatters kernel * value into the output) computed
// here, Keras' output shapes and refusals, UpSampling2D / UpSampling1D / Cropping2D /
// ZeroPadding1D values and gradients, configs, and a convolutional autoencoder that learns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using layers::Pair;
using test::message_of;

Tensor random_tensor(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, s);
}

struct TransposeCase {
  Pair kernel, strides;
  std::string padding;
  std::optional<Pair> output_padding;
  Pair dilation{1, 1};
  Shape input;  // (N, H, W, C)
  std::int64_t filters;
};

// Keras' output length (backend_utils.py, _get_output_shape_given_tf_padding), restated.
std::int64_t keras_length(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d,
                          const std::string& padding, std::optional<std::int64_t> op) {
  const std::int64_t ke = (k - 1) * d + 1;
  if (padding == "valid") return (in - 1) * s + ke + (op ? *op : std::max(ke, s) - ke);
  return op ? (in - 1) * s + ke % 2 + *op : in * s;
}

// y[p] = sum of x[i] * kernel[a] over i * s + a * d - pad = p (tf.nn.conv2d_transpose), where pad is
// the top / left padding TensorFlow's "same" gives the convolution from y back to x (none for
// "valid"); then + bias.
std::vector<float> scatter_reference(const TransposeCase& c, const Tensor& x, const Tensor& kernel,
                                     const std::vector<float>& bias, std::int64_t oh, std::int64_t ow) {
  const std::int64_t n = c.input[0], h = c.input[1], w = c.input[2], ch = c.input[3], f = c.filters;
  const auto pad = [&](std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t s, std::int64_t d) {
    if (c.padding == "valid") return std::int64_t{0};
    return std::max<std::int64_t>((in - 1) * s + (k - 1) * d + 1 - out, 0) / 2;
  };
  const std::int64_t pt = pad(h, oh, c.kernel[0], c.strides[0], c.dilation[0]);
  const std::int64_t pl = pad(w, ow, c.kernel[1], c.strides[1], c.dilation[1]);
  const auto xv = x.to_vector<float>();
  const auto kv = kernel.to_vector<float>();
  std::vector<float> y(static_cast<std::size_t>(n * oh * ow * f), 0.0f);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < h; ++i)
      for (std::int64_t j = 0; j < w; ++j)
        for (std::int64_t a = 0; a < c.kernel[0]; ++a)
          for (std::int64_t e = 0; e < c.kernel[1]; ++e) {
            const std::int64_t p = i * c.strides[0] + a * c.dilation[0] - pt;
            const std::int64_t q = j * c.strides[1] + e * c.dilation[1] - pl;
            if (p < 0 || p >= oh || q < 0 || q >= ow) continue;
            for (std::int64_t o = 0; o < f; ++o)
              for (std::int64_t k = 0; k < ch; ++k)
                y[static_cast<std::size_t>(((b * oh + p) * ow + q) * f + o)] +=
                    xv[static_cast<std::size_t>(((b * h + i) * w + j) * ch + k)] *
                    kv[static_cast<std::size_t>(((a * c.kernel[1] + e) * f + o) * ch + k)];
          }
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += bias[i % static_cast<std::size_t>(f)];
  return y;
}

TEST(Conv2DTranspose, MatchesTheScatterDefinitionForStridesPaddingsAndOutputPaddings) {
  const std::vector<TransposeCase> cases = {
      {{3, 3}, {2, 2}, "same", std::nullopt, {1, 1}, Shape{2, 4, 3, 3}, 2},  // the denoising autoencoder's
      {{3, 3}, {1, 1}, "valid", std::nullopt, {1, 1}, Shape{1, 3, 4, 2}, 3},
      {{2, 3}, {3, 2}, "valid", std::nullopt, {1, 1}, Shape{2, 3, 2, 1}, 2},  // stride > kernel: gaps
      {{3, 2}, {2, 3}, "valid", Pair{1, 2}, {1, 1}, Shape{2, 2, 3, 2}, 3},
      {{3, 3}, {2, 2}, "same", Pair{1, 0}, {1, 1}, Shape{1, 3, 3, 2}, 2},
      {{4, 4}, {2, 2}, "same", std::nullopt, {1, 1}, Shape{2, 3, 3, 2}, 1},  // even kernel, uneven padding
      {{2, 2}, {2, 2}, "same", Pair{1, 1}, {1, 1}, Shape{1, 2, 3, 1}, 2},
      {{3, 2}, {1, 1}, "same", std::nullopt, {2, 3}, Shape{2, 5, 6, 2}, 2},  // dilated
      {{1, 1}, {3, 2}, "valid", std::nullopt, {1, 1}, Shape{1, 2, 2, 2}, 2},
  };
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const TransposeCase& c = cases[ci];
    auto layer = std::make_shared<layers::Conv2DTransposeLayer>(
        layers::Conv2DTransposeOptions{.filters = c.filters,
                                       .kernel_size = c.kernel,
                                       .strides = c.strides,
                                       .padding = c.padding,
                                       .output_padding = c.output_padding,
                                       .dilation_rate = c.dilation,
                                       .bias_initializer = "glorot_uniform"});
    layer->build(c.input, 3 + ci);
    const std::int64_t oh =
        keras_length(c.input[1], c.kernel[0], c.strides[0], c.dilation[0], c.padding,
                     c.output_padding ? std::optional<std::int64_t>((*c.output_padding)[0]) : std::nullopt);
    const std::int64_t ow =
        keras_length(c.input[2], c.kernel[1], c.strides[1], c.dilation[1], c.padding,
                     c.output_padding ? std::optional<std::int64_t>((*c.output_padding)[1]) : std::nullopt);
    const Shape expected{c.input[0], oh, ow, c.filters};
    ASSERT_EQ(layer->kernel().shape(), (Shape{c.kernel[0], c.kernel[1], c.filters, c.input[3]})) << ci;
    const Tensor x = random_tensor(c.input, 10 + ci);
    const Tensor y = layer->call(x, {});
    ASSERT_EQ(y.shape(), expected) << "case " << ci;
    EXPECT_EQ(layer->compute_output_shape(Shape{-1, c.input[1], c.input[2], c.input[3]}),
              (Shape{-1, oh, ow, c.filters}));
    const auto want =
        scatter_reference(c, x, layer->kernel().value(), layer->bias().value().to_vector<float>(), oh, ow);
    const auto got = y.to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-5f * std::abs(want[i])) << "case " << ci << " element " << i;
  }
}

TEST(Conv2DTranspose, KerasShapesWithAnUnknownBatchAndItsRefusals) {
  const auto shape = [](layers::Conv2DTransposeOptions o, const Shape& in) {
    o.filters = 4;
    return layers::Conv2DTransposeLayer(o).compute_output_shape(in);
  };
  const Shape in{-1, 7, 5, 3};
  EXPECT_EQ(shape({.kernel_size = {3, 3}, .strides = {2, 2}, .padding = "same"}, in), (Shape{-1, 14, 10, 4}));
  EXPECT_EQ(shape({.kernel_size = {3, 3}, .strides = {2, 2}}, in), (Shape{-1, 15, 11, 4}));
  EXPECT_EQ(shape({.kernel_size = {2, 2}, .strides = {3, 3}}, in),
            (Shape{-1, 21, 15, 4}));  // max(kernel, stride)
  EXPECT_EQ(shape({.kernel_size = {3, 3}, .strides = {2, 2}, .output_padding = Pair{1, 0}}, in),
            (Shape{-1, 16, 11, 4}));
  EXPECT_EQ(
      shape({.kernel_size = {3, 3}, .strides = {2, 2}, .padding = "same", .output_padding = Pair{1, 1}}, in),
      (Shape{-1, 14, 10, 4}));
  EXPECT_EQ(shape({.kernel_size = {3, 3}, .strides = {2, 2}, .padding = "same"}, Shape{-1, -1, 5, 3}),
            (Shape{-1, -1, 10, 4}));
  // An even kernel, "same" and output_padding 0: (in - 1) * stride rows, which the "same"
  // convolution does not bring back to the input (TensorFlow refuses it too).
  EXPECT_NE(message_of([&] {
              (void)shape(
                  {.kernel_size = {2, 2}, .strides = {2, 2}, .padding = "same", .output_padding = Pair{0, 0}},
                  in);
            }).find("output_padding (0, 0)"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              (void)layers::Conv2DTranspose(
                  {.filters = 2, .kernel_size = {3, 3}, .strides = {2, 2}, .output_padding = Pair{2, 0}});
            }).find("output_padding must be at least 0 and less than strides"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              (void)layers::Conv2DTranspose(
                  {.filters = 2, .kernel_size = {3, 3}, .strides = {2, 2}, .dilation_rate = {2, 2}});
            }).find("dilation_rate"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              (void)layers::Conv2DTranspose(2, {3, 3}, "linear", "causal");
            }).find("causal"),
            std::string::npos);
}

TEST(Conv2DTranspose, ConfigRoundTripsAndParamCount) {
  auto layer = layers::Conv2DTranspose({.filters = 32,
                                        .kernel_size = {3, 3},
                                        .strides = {2, 2},
                                        .padding = "same",
                                        .output_padding = Pair{1, 1},
                                        .activation = "relu"});
  layer->build(Shape{-1, 7, 7, 32}, 1);
  EXPECT_EQ(layer->count_params(), 3 * 3 * 32 * 32 + 32);  // Keras' summary: 9,248
  const nlohmann::json c = layer->get_config();
  EXPECT_EQ(c.at("output_padding"), nlohmann::json::array({1, 1}));
  EXPECT_EQ(c.at("activation"), "relu");
  const auto again = layers::Conv2DTransposeLayer::from_config(c);
  EXPECT_EQ(again->get_config(), c);
  auto plain = layers::Conv2DTranspose(4, {2, 2});
  EXPECT_TRUE(plain->get_config().at("output_padding").is_null());
  EXPECT_EQ(layers::Conv2DTransposeLayer::from_config(plain->get_config())->get_config(),
            plain->get_config());
}

// d sum(w * layer(x)) / dx through the tape.
Tensor input_gradient(const layers::Layer& layer, const Tensor& x, const Tensor& w) {
  GradientTape tape;
  tape.watch(x);
  const Tensor y = layer.call(x, {});
  return tape.gradient(sum(mul(y, w)), std::vector<Tensor>{x})[0];
}

TEST(UpSampling2D, NearestRepeatsRowsAndColumnsAndSumsTheirGradients) {
  auto layer = layers::UpSampling2D({2, 3});
  const Shape in{2, 3, 2, 2};
  EXPECT_EQ(layer->compute_output_shape(Shape{-1, 3, 2, 2}), (Shape{-1, 6, 6, 2}));
  const Tensor x = random_tensor(in, 1);
  const Tensor y = layer->call(x, {});
  ASSERT_EQ(y.shape(), (Shape{2, 6, 6, 2}));
  const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t j = 0; j < 6; ++j)
        for (std::int64_t c = 0; c < 2; ++c)
          ASSERT_EQ(yv[static_cast<std::size_t>(((b * 6 + i) * 6 + j) * 2 + c)],
                    xv[static_cast<std::size_t>(((b * 3 + i / 2) * 2 + j / 3) * 2 + c)]);
  const Tensor w = random_tensor(y.shape(), 2);
  const auto g = input_gradient(*layer, x, w).to_vector<float>();
  const auto wv = w.to_vector<float>();
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 2; ++j)
        for (std::int64_t c = 0; c < 2; ++c) {
          float block = 0;
          for (std::int64_t a = 0; a < 2; ++a)
            for (std::int64_t e = 0; e < 3; ++e)
              block += wv[static_cast<std::size_t>(((b * 6 + i * 2 + a) * 6 + j * 3 + e) * 2 + c)];
          EXPECT_NEAR(g[static_cast<std::size_t>(((b * 3 + i) * 2 + j) * 2 + c)], block, 1e-6f);
        }
}

TEST(UpSampling2D, BilinearUsesHalfPixelCentresAndKeepsTheEdges) {
  // tf.image.resize([[0, 1], [2, 3]], (4, 4), "bilinear"): rows 0, 0.25, 0.75, 1 of the way down.
  auto layer = layers::UpSampling2D({2, 2}, "bilinear");
  const Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3}, Shape{1, 2, 2, 1});
  const auto y = layer->call(x, {}).to_vector<float>();
  const std::vector<float> row0{0, 0.25f, 0.75f, 1}, row3{2, 2.25f, 2.75f, 3};
  for (std::size_t j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ(y[j], row0[j]);
    EXPECT_FLOAT_EQ(y[4 + j], 0.75f * row0[j] + 0.25f * row3[j]);
    EXPECT_FLOAT_EQ(y[8 + j], 0.25f * row0[j] + 0.75f * row3[j]);
    EXPECT_FLOAT_EQ(y[12 + j], row3[j]);
  }
  EXPECT_NE(message_of([] {
              (void)layers::UpSampling2D({2, 2}, "gaussian");
            }).find("interpolation 'gaussian'"),
            std::string::npos);
}

TEST(UpSampling1D, RepeatsEachStep) {
  auto layer = layers::UpSampling1D(3);
  EXPECT_EQ(layer->compute_output_shape(Shape{-1, 4, 2}), (Shape{-1, 12, 2}));
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 2, 2});
  EXPECT_EQ(layer->call(x, {}).to_vector<float>(),
            (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4, 5, 6, 5, 6, 5, 6, 7, 8, 7, 8, 7, 8}));
}

TEST(Cropping2D, CutsTheBordersAndItsGradientIsZeroThere) {
  auto layer = layers::Cropping2D({Pair{1, 0}, Pair{0, 2}});
  EXPECT_EQ(layer->compute_output_shape(Shape{-1, 3, 4, 1}), (Shape{-1, 2, 2, 1}));
  std::vector<float> v(12);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor x = Tensor::from_vector(v, Shape{1, 3, 4, 1});
  EXPECT_EQ(layer->call(x, {}).to_vector<float>(), (std::vector<float>{4, 5, 8, 9}));
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{1, 2, 2, 1});
  EXPECT_EQ(input_gradient(*layer, x, w).to_vector<float>(),
            (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}));
  EXPECT_NE(message_of([&] {
              (void)layer->compute_output_shape(Shape{-1, 1, 4, 1});
            }).find("leaves nothing"),
            std::string::npos);
  const auto again = layers::Cropping2DLayer::from_config(layer->get_config());
  EXPECT_EQ(again->get_config(), layer->get_config());
  // Keras' int and symmetric-pair forms.
  nlohmann::json c = layer->get_config();
  c["cropping"] = 2;
  EXPECT_EQ(
      std::dynamic_pointer_cast<layers::Cropping2DLayer>(layers::Cropping2DLayer::from_config(c))->cropping(),
      (std::array<Pair, 2>{Pair{2, 2}, Pair{2, 2}}));
  c["cropping"] = nlohmann::json::array({1, 3});
  EXPECT_EQ(
      std::dynamic_pointer_cast<layers::Cropping2DLayer>(layers::Cropping2DLayer::from_config(c))->cropping(),
      (std::array<Pair, 2>{Pair{1, 1}, Pair{3, 3}}));
}

TEST(ZeroPadding1D, PadsTheSteps) {
  auto layer = layers::ZeroPadding1D({1, 2});
  EXPECT_EQ(layer->compute_output_shape(Shape{-1, 2, 2}), (Shape{-1, 5, 2}));
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{1, 2, 2});
  EXPECT_EQ(layer->call(x, {}).to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0, 0, 0}));
}

// A replica's share of a short last batch may be empty: the layers without weights keep the
// tape's path to their input, so that the convolution before them gets its (zero) gradient.
TEST(UpSampling2D, AnEmptyBatchKeepsTheGradientPathOfTheLayersWithoutWeights) {
  const std::vector<std::pair<layers::LayerPtr, bool>> cases = {
      // (layer, takes sequences)
      {layers::UpSampling2D(), false},
      {layers::UpSampling2D({2, 2}, "bilinear"), false},
      {layers::Cropping2D({Pair{1, 0}, Pair{0, 1}}), false},
      {layers::UpSampling1D(2), true},
      {layers::ZeroPadding1D(), true}};
  for (const auto& [layer, sequence] : cases) {
    auto conv = sequence ? layers::Conv1D(2, 1) : layers::Conv2D(2, {1, 1});
    const Shape in = sequence ? Shape{0, 4, 3} : Shape{0, 3, 4, 3};
    conv->build(in, 1);
    const Variable kernel = conv->trainable_variables()[0];
    GradientTape tape;
    const Tensor y = layer->call(conv->call(Tensor::zeros(in), {}), {});
    EXPECT_EQ(y.dim(0), 0) << layer->class_name();
    const Tensor g = tape.gradient(sum(y), std::vector<Variable>{kernel})[0];
    ASSERT_TRUE(g.defined()) << layer->class_name();
    for (float v : g.to_vector<float>()) ASSERT_EQ(v, 0.0f) << layer->class_name();
  }
}

// keras.io's "Convolutional autoencoder for image denoising", scaled down: Conv2D -> MaxPooling2D
// -> Conv2DTranspose(strides 2, relu, "same") -> Conv2D(1, sigmoid), binary cross-entropy.
TEST(Conv2DTranspose, ADenoisingAutoencoderLearns) {
  constexpr std::int64_t n = 64, side = 8;
  std::vector<float> clean(static_cast<std::size_t>(n * side * side));
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < side; ++i)
      for (std::int64_t j = 0; j < side; ++j)  // stripes of a few widths and offsets
        clean[static_cast<std::size_t>((b * side + i) * side + j)] =
            ((j + b % 3) / (1 + b % 2)) % 2 ? 1.0f : 0.0f;
  const Tensor target = Tensor::from_vector(clean, Shape{n, side, side, 1});
  set_random_seed(4);
  Sequential m({layers::Input({side, side, 1}), layers::Conv2D(8, {3, 3}, "relu", "same"),
                layers::MaxPooling2D({2, 2}), layers::Conv2DTranspose(8, {3, 3}, "relu", "same", {2, 2}),
                layers::Conv2D(1, {3, 3}, "sigmoid", "same")});
  EXPECT_EQ(m.output_shape(), (Shape{-1, side, side, 1}));
  m.compile(optimizers::Adam(1e-2), losses::BinaryCrossentropy());
  const History h = m.fit(target, target, {.epochs = 15, .batch_size = 16, .verbose = 0});
  const auto& loss = h.history.at("loss");
  EXPECT_LT(loss.back(), 0.5 * loss.front()) << loss.front() << " -> " << loss.back();
}

}  // namespace
}  // namespace lockstep
