// Finite-difference checks for every layer: the gradient with respect to the layer's input
// (through lockstep::gradcheck) and with respect to each of its variables.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lockstep/layers/group_normalization.hpp"
#include "lockstep/layers/regularization_layers.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using lockstep::layers::Pair;

namespace {
Tensor uniform(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(s.numel()));
  for (auto& x : v) x = u(rng) >= 0 ? u(rng) * 0.9f + 0.1f : u(rng) * 0.9f - 0.1f;  // away from relu's kink
  return Tensor::from_vector(v, s);
}

double weighted(const Tensor& out, const Tensor& w) {
  double s = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.data<float>()[i]) * w.data<float>()[i];
  return s;
}

// d sum(w * layer(x)) / d variable, tape vs central differences, for every variable element.
void check_variables(const layers::Layer& layer, const Tensor& x, const layers::CallContext& ctx) {
  const Tensor w = uniform(layer.compute_output_shape(x.shape()), 99);
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    grads = tape.gradient(mul(layer.call(x, ctx), w), layer.trainable_variables());
  }
  const auto vars = layer.trainable_variables();
  for (std::size_t k = 0; k < vars.size(); ++k) {
    ASSERT_TRUE(grads[k].defined()) << vars[k].name();
    float* p = const_cast<float*>(vars[k].value().data<float>());
    for (std::int64_t i = 0; i < vars[k].shape().numel(); ++i) {
      const float orig = p[i];
      const float eps = 1e-3f;
      p[i] = orig + eps;
      const double hi = weighted(layer.call(x, ctx), w);
      p[i] = orig - eps;
      const double lo = weighted(layer.call(x, ctx), w);
      p[i] = orig;
      const double numeric = (hi - lo) / (2.0 * eps);
      EXPECT_NEAR(grads[k].data<float>()[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << layer.name() << " " << vars[k].name() << "[" << i << "]";
    }
  }
}

struct LayerCase {
  const char* name;
  std::function<layers::LayerPtr()> make;
  Shape input;
  bool training = false;
};
}  // namespace

class LayerGradcheck : public ::testing::TestWithParam<int> {};

std::vector<LayerCase> layer_cases() {
  return {
      {"dense_linear", [] { return layers::Dense(4, "linear", 3); }, {5, 3}},
      {"dense_relu", [] { return layers::Dense(4, "relu", 3); }, {5, 3}},
      {"dense_sigmoid", [] { return layers::Dense(4, "sigmoid", 3); }, {5, 3}},
      {"dense_tanh", [] { return layers::Dense(4, "tanh", 3); }, {5, 3}},
      {"dense_gelu", [] { return layers::Dense(4, "gelu", 3); }, {5, 3}},
      {"dense_softmax", [] { return layers::Dense(4, "softmax", 3); }, {5, 3}},
      {"dense_no_bias", [] { return layers::Dense({.units = 3, .use_bias = false}); }, {4, 6}},
      {"dropout_training", [] { return layers::Dropout(0.4f); }, {6, 5}, true},
      {"activation_tanh", [] { return layers::Activation("tanh"); }, {3, 4}},
      {"activation_log_softmax", [] { return layers::Activation("log_softmax"); }, {3, 4}},
      {"flatten", [] { return layers::Flatten(); }, {2, 3, 4}},
      {"reshape", [] { return layers::Reshape({4, -1}); }, {2, 12}},
      {"conv2d_valid_tanh", [] { return layers::Conv2D(3, {3, 2}, "tanh"); }, {2, 5, 4, 2}},
      {"conv2d_same_strided", [] { return layers::Conv2D(4, {3, 3}, "linear", "same", {2, 2}); }, {2, 5, 6, 3}},
      {"conv2d_dilated_grouped_no_bias",
       [] {
         return layers::Conv2D(
             {.filters = 4, .kernel_size = {2, 2}, .dilation_rate = {2, 1}, .groups = 2, .use_bias = false});
       },
       {1, 5, 4, 4}},
      {"depthwise_conv2d_same",
       [] { return layers::DepthwiseConv2D({.kernel_size = {3, 3}, .padding = "same", .depth_multiplier = 2}); },
       {2, 4, 5, 3}},
      {"max_pooling2d", [] { return layers::MaxPooling2D(); }, {2, 4, 5, 3}},
      {"average_pooling2d_same", [] { return layers::AveragePooling2D({3, 3}, Pair{2, 2}, "same"); }, {2, 5, 5, 2}},
      {"global_average_pooling2d", [] { return layers::GlobalAveragePooling2D(); }, {2, 3, 4, 5}},
      {"zero_padding2d", [] { return layers::ZeroPadding2D({Pair{1, 0}, Pair{2, 1}}); }, {2, 3, 2, 2}},
      {"rescaling", [] { return layers::Rescaling(0.5f, -1.0f); }, {3, 4}},
      {"batch_normalization_training", [] { return layers::BatchNormalization(); }, {6, 3}, true},
      {"batch_normalization_training_nhwc", [] { return layers::BatchNormalization({.center = false}); },
       {2, 3, 2, 2}, true},
      {"batch_normalization_inference", [] { return layers::BatchNormalization(); }, {4, 3}},
      {"layer_normalization", [] { return layers::LayerNormalization(); }, {4, 5}},
      {"layer_normalization_3d_no_center",
       [] { return layers::LayerNormalization({.epsilon = 1e-2f, .center = false}); }, {2, 3, 4}},
      {"dense_silu", [] { return layers::Dense(4, "silu", 3); }, {5, 3}},
      {"activation_swish", [] { return layers::Activation("swish"); }, {3, 4}},
      {"conv2d_gelu", [] { return layers::Conv2D(3, {2, 2}, "gelu"); }, {2, 4, 3, 2}},
      {"dense_3d_silu", [] { return layers::Dense(3, "silu"); }, {2, 4, 5}},
      {"softmax_last", [] { return layers::Softmax(); }, {3, 4}},
      {"softmax_middle_axis", [] { return layers::Softmax(1); }, {2, 3, 4}},
      {"global_average_pooling1d", [] { return layers::GlobalAveragePooling1D(); }, {2, 3, 4}},
      {"global_average_pooling1d_keepdims", [] { return layers::GlobalAveragePooling1D(true); }, {2, 3, 4}},
      {"repeat_vector", [] { return layers::RepeatVector(3); }, {2, 4}},
      {"permute", [] { return layers::Permute({2, 3, 1}); }, {2, 3, 4, 2}},
      {"conv1d_valid_tanh", [] { return layers::Conv1D(3, 3, "tanh"); }, {2, 6, 2}},
      {"conv1d_same_strided", [] { return layers::Conv1D(4, 3, "linear", "same", 2); }, {2, 7, 3}},
      {"conv1d_causal_dilated_grouped_no_bias",
       [] {
         return layers::Conv1D({.filters = 4, .kernel_size = 3, .padding = "causal", .dilation_rate = 2, .groups = 2,
                                .use_bias = false});
       },
       {2, 6, 4}},
      {"conv1d_causal_strided_relu", [] { return layers::Conv1D(3, 2, "relu", "causal", 3); }, {2, 7, 2}},
      {"max_pooling1d", [] { return layers::MaxPooling1D(); }, {2, 5, 3}},
      {"max_pooling1d_same_strided", [] { return layers::MaxPooling1D(3, 2, "same"); }, {2, 6, 2}},
      {"average_pooling1d_same", [] { return layers::AveragePooling1D(3, 2, "same"); }, {2, 6, 2}},
      {"global_max_pooling1d", [] { return layers::GlobalMaxPooling1D(); }, {2, 3, 4}},
      {"global_max_pooling1d_keepdims", [] { return layers::GlobalMaxPooling1D(true); }, {2, 3, 4}},
      {"global_max_pooling2d", [] { return layers::GlobalMaxPooling2D(); }, {2, 3, 2, 3}},
      {"simple_rnn", [] { return layers::SimpleRNN(3); }, {2, 4, 2}},
      {"simple_rnn_sequences_backwards",
       [] { return layers::SimpleRNN({.units = 3, .return_sequences = true, .go_backwards = true}); }, {2, 3, 2}},
      {"lstm", [] { return layers::LSTM(3); }, {2, 4, 2}},
      {"lstm_sequences", [] { return layers::LSTM(2, true); }, {2, 3, 3}},
      // The backward outputs put back in time order (a gather) before the merge.
      {"bidirectional_lstm_sequences", [] { return layers::Bidirectional(layers::LSTM(2, true)); }, {2, 3, 2}},
      {"bidirectional_gru_ave", [] { return layers::Bidirectional(layers::GRU(2), "ave"); }, {2, 3, 2}},
      {"gru", [] { return layers::GRU(3); }, {2, 4, 2}},
      {"gru_reset_before_sequences",
       [] { return layers::GRU({.units = 2, .reset_after = false, .return_sequences = true}); }, {2, 3, 2}},
      {"simple_rnn_dropout_training",
       [] { return layers::SimpleRNN({.units = 3, .dropout = 0.4f, .recurrent_dropout = 0.3f}); }, {2, 3, 2}, true},
      {"lstm_dropout_training", [] { return layers::LSTM({.units = 2, .dropout = 0.3f}); }, {2, 3, 2}, true},
      {"lstm_recurrent_dropout_training",
       [] { return layers::LSTM({.units = 2, .dropout = 0.3f, .recurrent_dropout = 0.4f}); }, {2, 3, 2}, true},
      {"gru_reset_before_recurrent_dropout_training",
       [] { return layers::GRU({.units = 2, .reset_after = false, .recurrent_dropout = 0.4f}); }, {2, 3, 2}, true},
      // Keras 3's other activations (inputs in [-1, 1], away from 0) and advanced activation layers.
      {"activation_elu", [] { return layers::Activation("elu"); }, {3, 4}},
      {"activation_selu", [] { return layers::Activation("selu"); }, {3, 4}},
      {"activation_leaky_relu", [] { return layers::Activation("leaky_relu"); }, {3, 4}},
      {"activation_relu6", [] { return layers::Activation("relu6"); }, {3, 4}},
      {"activation_softplus", [] { return layers::Activation("softplus"); }, {3, 4}},
      {"activation_softsign", [] { return layers::Activation("softsign"); }, {3, 4}},
      {"activation_hard_sigmoid", [] { return layers::Activation("hard_sigmoid"); }, {3, 4}},
      {"activation_hard_silu", [] { return layers::Activation("hard_silu"); }, {3, 4}},
      {"activation_exponential", [] { return layers::Activation("exponential"); }, {3, 4}},
      {"dense_mish", [] { return layers::Dense(4, "mish", 3); }, {5, 3}},
      {"relu_layer_all_arguments", [] { return layers::ReLU(2.0f, 0.3f, 0.05f); }, {3, 4}},
      {"leaky_relu_layer", [] { return layers::LeakyReLU(); }, {3, 4}},
      {"elu_layer", [] { return layers::ELU(0.6f); }, {3, 4}},
      {"prelu", [] { return layers::PReLU("uniform"); }, {3, 4}},
      {"prelu_shared_axes", [] { return layers::PReLU("ones", {1}); }, {2, 3, 4}},
      {"separable_conv2d",
       [] { return layers::SeparableConv2D({.filters = 3, .kernel_size = {2, 2}, .depth_multiplier = 2}); },
       {2, 4, 3, 2}},
      {"separable_conv2d_same_strided_softsign",
       [] {
         return layers::SeparableConv2D(
             {.filters = 2, .kernel_size = {3, 3}, .strides = {2, 2}, .padding = "same", .activation = "softsign"});
       },
       {2, 5, 4, 3}},
      // The decoder side: Conv2DTranspose (its own op and gradient), the gathers of UpSampling and
      // Cropping2D (a repeated row's gradients add up), bilinear's weighted gathers.
      {"conv2d_transpose_valid_tanh", [] { return layers::Conv2DTranspose(3, {3, 2}, "tanh"); }, {2, 3, 4, 2}},
      {"conv2d_transpose_same_strided",
       [] { return layers::Conv2DTranspose(2, {3, 3}, "linear", "same", {2, 2}); }, {2, 3, 2, 3}},
      {"conv2d_transpose_valid_output_padding_no_bias",
       [] {
         return layers::Conv2DTranspose(
             {.filters = 2, .kernel_size = {2, 3}, .strides = {3, 2}, .output_padding = Pair{2, 1}, .use_bias = false});
       },
       {2, 2, 3, 2}},
      {"conv2d_transpose_same_dilated",
       [] { return layers::Conv2DTranspose({.filters = 2, .kernel_size = {3, 2}, .padding = "same", .dilation_rate = {2, 2}}); },
       {1, 4, 5, 2}},
      {"up_sampling2d", [] { return layers::UpSampling2D({2, 3}); }, {2, 2, 3, 2}},
      {"up_sampling2d_bilinear", [] { return layers::UpSampling2D({3, 2}, "bilinear"); }, {2, 3, 2, 2}},
      // Both axes in one pass (bilinear growth of 32 channels or more), its gradient over the
      // transposed product of their taps.
      {"up_sampling2d_bilinear_channels", [] { return layers::UpSampling2D({2, 2}, "bilinear"); }, {1, 2, 3, 32}},
      // resize_images' other interpolations: taps gathered at once, weighted and summed.
      {"up_sampling2d_bicubic", [] { return layers::UpSampling2D({2, 3}, "bicubic"); }, {2, 3, 2, 2}},
      {"resizing_lanczos3_down_up", [] { return layers::Resizing(3, 7, "lanczos3"); }, {2, 5, 4, 2}},
      {"resizing_lanczos5_up_down", [] { return layers::Resizing(9, 4, "lanczos5"); }, {1, 6, 7, 2}},
      {"resizing_area_down", [] { return layers::Resizing(3, 2, "area"); }, {2, 7, 5, 2}},
      {"resizing_bicubic_crop", [] { return layers::Resizing(4, 4, "bicubic", true); }, {1, 5, 7, 2}},
      {"resizing_antialias_padded",
       [] {
         return layers::Resizing({.height = 2, .width = 6, .pad_to_aspect_ratio = true, .fill_value = 0.5f,
                                  .antialias = true});
       },
       {2, 7, 5, 2}},
      {"up_sampling1d", [] { return layers::UpSampling1D(3); }, {2, 3, 2}},
      {"cropping2d", [] { return layers::Cropping2D({Pair{1, 0}, Pair{1, 2}}); }, {2, 4, 5, 2}},
      {"zero_padding1d", [] { return layers::ZeroPadding1D({2, 1}); }, {2, 3, 2}},
      // The rest of Keras 3's 1D family (the 2D ops on the (N, 1, steps, C) view) and the
      // activations composed of several ops.
      {"conv1d_transpose_valid_tanh", [] { return layers::Conv1DTranspose(3, 3, "tanh"); }, {2, 4, 2}},
      {"conv1d_transpose_same_strided", [] { return layers::Conv1DTranspose(2, 3, "linear", "same", 2); }, {2, 3, 3}},
      {"conv1d_transpose_valid_output_padding_no_bias",
       [] {
         return layers::Conv1DTranspose(
             {.filters = 2, .kernel_size = 2, .strides = 3, .output_padding = 2, .use_bias = false});
       },
       {2, 3, 2}},
      {"conv1d_transpose_same_dilated",
       [] { return layers::Conv1DTranspose({.filters = 2, .kernel_size = 3, .padding = "same", .dilation_rate = 2}); },
       {1, 5, 2}},
      {"depthwise_conv1d_same_strided",
       [] { return layers::DepthwiseConv1D({.kernel_size = 3, .strides = 2, .padding = "same", .depth_multiplier = 2}); },
       {2, 5, 3}},
      {"depthwise_conv1d_valid_dilated_no_bias",
       [] { return layers::DepthwiseConv1D({.kernel_size = 2, .dilation_rate = 2, .use_bias = false}); }, {2, 5, 2}},
      {"separable_conv1d",
       [] { return layers::SeparableConv1D({.filters = 3, .kernel_size = 2, .depth_multiplier = 2}); }, {2, 4, 2}},
      {"separable_conv1d_same_strided_softsign",
       [] {
         return layers::SeparableConv1D(
             {.filters = 2, .kernel_size = 3, .strides = 2, .padding = "same", .activation = "softsign"});
       },
       {2, 5, 3}},
      {"cropping1d", [] { return layers::Cropping1D({1, 2}); }, {2, 5, 2}},
      {"activation_celu", [] { return layers::Activation("celu"); }, {3, 4}},
      {"activation_log_sigmoid", [] { return layers::Activation("log_sigmoid"); }, {3, 4}},
      {"activation_tanh_shrink", [] { return layers::Activation("tanh_shrink"); }, {3, 4}},
      {"activation_squareplus", [] { return layers::Activation("squareplus"); }, {3, 4}},
      {"activation_sparse_plus", [] { return layers::Activation("sparse_plus"); }, {3, 4}},
      // Keras 3's other regularization layers in training (their masks and noise constants of the
      // call's key) and the group and unit normalisations.
      {"spatial_dropout1d_training", [] { return layers::SpatialDropout1D(0.4f); }, {3, 4, 5}, true},
      {"spatial_dropout2d_channels_first_training",
       [] { return layers::SpatialDropout2D(0.4f, "channels_first"); }, {2, 5, 3, 2}, true},
      {"gaussian_noise_training", [] { return layers::GaussianNoise(0.3f); }, {3, 4}, true},
      {"gaussian_dropout_training", [] { return layers::GaussianDropout(0.3f); }, {3, 4}, true},
      {"alpha_dropout_training", [] { return layers::AlphaDropout(0.3f); }, {3, 5}, true},
      {"group_normalization", [] { return layers::GroupNormalization({.groups = 2}); }, {2, 3, 4}},
      {"group_normalization_channels_first_no_center",
       [] { return layers::GroupNormalization({.groups = 3, .axis = 1, .epsilon = 1e-2f, .center = false}); },
       {2, 6, 2, 2}},
      {"instance_normalization", [] { return layers::GroupNormalization({.groups = -1}); }, {2, 4, 3}},
      {"unit_normalization", [] { return layers::UnitNormalization(); }, {3, 4}},
      {"unit_normalization_two_axes", [] { return layers::UnitNormalization({1, 2}); }, {2, 3, 2}},
  };
}

TEST_P(LayerGradcheck, InputAndVariableGradientsMatchFiniteDifferences) {
  const LayerCase c = layer_cases()[static_cast<std::size_t>(GetParam())];
  auto layer = c.make();
  std::vector<std::int64_t> dims = c.input.dims();
  dims[0] = -1;
  layer->build(Shape(dims), 5);
  const layers::CallContext ctx{.training = c.training, .seed = 3, .step = 2};
  const Tensor x = uniform(c.input, 7);
  const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return layer->call(in[0], ctx); }, {x});
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
  check_variables(*layer, x, ctx);
}

INSTANTIATE_TEST_SUITE_P(EveryLayer, LayerGradcheck, ::testing::Range(0, static_cast<int>(layer_cases().size())),
                         [](const auto& info) { return std::string(layer_cases()[static_cast<std::size_t>(info.param)].name); });

// Add takes a list: the gradient of every input is the output's gradient.
TEST(MergeLayerGradcheck, AddOfThreeInputsMatchesFiniteDifferences) {
  const auto add = std::dynamic_pointer_cast<layers::MergeLayer>(layers::Add());
  add->build_merge({Shape{-1, 3, 2}, Shape{-1, 3, 2}, Shape{-1, 3, 2}}, 5);
  const std::vector<Tensor> xs{uniform({4, 3, 2}, 1), uniform({4, 3, 2}, 2), uniform({4, 3, 2}, 3)};
  const GradcheckResult r =
      gradcheck([&](const std::vector<Tensor>& in) { return add->merge(in, layers::CallContext{}); }, xs);
  EXPECT_TRUE(r.ok) << r.message;
}

// Embedding's input is indices (no gradient): its table's gradient, with repeated indices adding up.
TEST(EmbeddingGradcheck, TableGradientMatchesFiniteDifferences) {
  auto emb = layers::Embedding(5, 3);
  emb->build(Shape{-1, 4}, 5);
  const Tensor idx = Tensor::from_vector(std::vector<float>{0, 2, 2, 4, 1, 4, 4, 0}, {2, 4});
  check_variables(*emb, idx, layers::CallContext{});
}

// Every merge layer on a list: each input's gradient.
TEST(MergeLayerGradcheck, EveryMergeLayerMatchesFiniteDifferences) {
  struct Case {
    const char* name;
    layers::LayerPtr layer;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"multiply", layers::Multiply(), {{4, 3}, {4, 3}, {4, 3}}},
      {"subtract", layers::Subtract(), {{4, 3}, {4, 3}}},
      {"average", layers::Average(), {{4, 3}, {4, 3}, {4, 3}}},
      {"maximum", layers::Maximum(), {{4, 3}, {4, 3}}},
      {"minimum", layers::Minimum(), {{4, 3}, {4, 3}}},
      {"concatenate_last", layers::Concatenate(), {{2, 3, 2}, {2, 3, 1}, {2, 3, 3}}},
      {"concatenate_middle", layers::Concatenate(1), {{2, 1, 2}, {2, 3, 2}}},
      {"dot_2d_normalized", layers::Dot(1, true), {{4, 3}, {4, 3}}},
      {"dot_3d_last", layers::Dot(2), {{2, 3, 4}, {2, 5, 4}}},
      {"dot_3d_mixed", layers::Dot(std::array<int, 2>{1, 2}), {{2, 3, 4}, {2, 2, 3}}},
  };
  std::uint64_t seed = 10;
  for (const auto& c : cases) {
    const auto merge = std::dynamic_pointer_cast<layers::MergeLayer>(c.layer);
    std::vector<Shape> symbolic;
    std::vector<Tensor> xs;
    for (const auto& s : c.shapes) {
      std::vector<std::int64_t> d = s.dims();
      d[0] = -1;
      symbolic.emplace_back(d);
      xs.push_back(uniform(s, seed++));
    }
    if (std::string(c.name) == "maximum" || std::string(c.name) == "minimum") xs[1] = add_scalar(xs[0], 0.3f);
    merge->build_merge(symbolic, 5);
    const GradcheckResult r =
        gradcheck([&](const std::vector<Tensor>& in) { return merge->merge(in, layers::CallContext{}); }, xs);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
  }
}
