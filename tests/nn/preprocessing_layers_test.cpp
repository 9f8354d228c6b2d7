// Normalization, RandomFlip, RandomContrast and RandomBrightness (Keras 3's preprocessing layers
// inside a model): values worked out by hand, adapt over several batches, invert, flips exact, the
// colour layers' one factor per image within Keras' bounds, training vs inference, config round trips.
#include "lockstep/layers/preprocessing_layers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/layer_registry.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using nlohmann::json;

layers::NormalizationLayer& as_norm(const layers::LayerPtr& l) {
  return dynamic_cast<layers::NormalizationLayer&>(*l);
}

// Keras' docstring example: adapt on [[0,7,4],[2,9,6],[0,7,4],[2,9,6]] (mean 1, 8, 5; variance 1
// each), then [[0,7,4]] -> [-1,-1,-1] and, inverted, [[1,2,3]] -> [2,10,8].
TEST(Normalization, AdaptsPerFeatureAsKerasDocstringAndInverts) {
  const Tensor data = Tensor::from_vector<float>({0, 7, 4, 2, 9, 6, 0, 7, 4, 2, 9, 6}, {4, 3});
  auto n = layers::Normalization();
  as_norm(n).adapt(data);
  EXPECT_EQ(as_norm(n).mean().to_vector<float>(), (std::vector<float>{1, 8, 5}));
  EXPECT_EQ(as_norm(n).variance().to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(n->call(Tensor::from_vector<float>({0, 7, 4}, {1, 3}), CallContext{}).to_vector<float>(),
            (std::vector<float>{-1, -1, -1}));
  // Weights: mean, variance, count (Keras' order), none trainable.
  ASSERT_EQ(n->variables().size(), 3u);
  EXPECT_TRUE(n->trainable_variables().empty());
  EXPECT_EQ(n->variables()[2].shape(), Shape{});
  auto inv = layers::Normalization({.invert = true});
  as_norm(inv).adapt(data);
  EXPECT_EQ(inv->call(Tensor::from_vector<float>({1, 2, 3}, {1, 3}), CallContext{}).to_vector<float>(),
            (std::vector<float>{2, 10, 8}));
}

// Over several batches of unequal sizes the statistics are those of all the data at once (Keras'
// combination), here per channel of images (axis -1 of rank 4) and over everything (axis=None).
TEST(Normalization, AdaptOverSeveralBatchesGivesTheStatisticsOfAllTheData) {
  std::vector<float> all;
  std::vector<Tensor> batches;
  for (int b = 0, start = 0; b < 3; ++b) {
    const int rows = b + 1;  // 1, 2, 3 images of 2x2x2
    std::vector<float> v;
    for (int i = 0; i < rows * 8; ++i)
      v.push_back(std::sin(0.7f * static_cast<float>(start + i)) * 3.0f + (i % 2) * 5.0f);
    start += rows * 8;
    all.insert(all.end(), v.begin(), v.end());
    batches.push_back(Tensor::from_vector(v, {rows, 2, 2, 2}));
  }
  double mean[2] = {0, 0}, var[2] = {0, 0};
  for (std::size_t i = 0; i < all.size(); ++i) mean[i % 2] += all[i] / 24.0;
  for (std::size_t i = 0; i < all.size(); ++i)
    var[i % 2] += (all[i] - mean[i % 2]) * (all[i] - mean[i % 2]) / 24.0;
  auto n = layers::Normalization();
  as_norm(n).adapt(batches);
  EXPECT_EQ(n->input_shape(), (Shape{-1, 2, 2, 2}));
  const auto m = as_norm(n).mean().to_vector<float>(), v = as_norm(n).variance().to_vector<float>();
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(m[c], mean[c], 1e-5) << c;
    EXPECT_NEAR(v[c], var[c], 1e-4) << c;
  }
  const Tensor x = batches[2];
  const auto y = n->call(x, CallContext{}).to_vector<float>();
  const auto xv = x.to_vector<float>();
  for (std::size_t i = 0; i < xv.size(); ++i)
    EXPECT_NEAR(y[i], (xv[i] - mean[i % 2]) / std::sqrt(var[i % 2]), 1e-5) << i;
  // axis=None: one mean and variance over every element.
  auto all_axes = layers::Normalization({.axis = std::nullopt});
  as_norm(all_axes).adapt(batches);
  double mu = 0, s2 = 0;
  for (float a : all) mu += a / 48.0;  // 6 images of 8 values
  for (float a : all) s2 += (a - mu) * (a - mu) / 48.0;
  EXPECT_NEAR(as_norm(all_axes).mean().to_vector<float>()[0], mu, 1e-5);
  EXPECT_NEAR(as_norm(all_axes).variance().to_vector<float>()[0], s2, 1e-4);
}

// Given mean and variance are constants (no weights), a scalar broadcasting; a zero variance
// divides by Keras' epsilon 1e-7, not by zero.
TEST(Normalization, GivenMeanAndVarianceAndTheEpsilonFloor) {
  auto n = layers::Normalization({.mean = std::vector<float>{3}, .variance = std::vector<float>{2}});
  n->build(Shape{-1, 1}, 0);
  EXPECT_TRUE(n->variables().empty());
  const auto y = n->call(Tensor::from_vector<float>({1, 2, 3}, {3, 1}), CallContext{}).to_vector<float>();
  EXPECT_NEAR(y[0], -1.4142135f, 1e-6);
  EXPECT_NEAR(y[1], -0.70710677f, 1e-6);
  EXPECT_EQ(y[2], 0.0f);
  auto z = layers::Normalization({.mean = std::vector<float>{1, 0}, .variance = std::vector<float>{4, 0}});
  z->build(Shape{-1, 2}, 0);
  const auto yz = z->call(Tensor::from_vector<float>({5, 1e-6f}, {1, 2}), CallContext{}).to_vector<float>();
  EXPECT_EQ(yz[0], 2.0f);
  EXPECT_NEAR(yz[1], 10.0f, 1e-5);
  EXPECT_THROW(as_norm(z).adapt(Tensor::ones({2, 2})), ValueError);
  EXPECT_THROW(layers::Normalization({.mean = std::vector<float>{1}}), ValueError);
  auto batch_axis = layers::Normalization({.axis = std::vector<std::int64_t>{0}});
  EXPECT_THROW(batch_axis->build(Shape{-1, 3}, 0), ValueError);
}

TEST(Normalization, ConfigRoundTripsAsKerasWritesIt) {
  auto n = layers::Normalization({.axis = std::nullopt,
                                  .mean = std::vector<float>{1, 2},
                                  .variance = std::vector<float>{3, 4},
                                  .invert = true,
                                  .name = "norm"});
  const json c = n->get_config();
  EXPECT_EQ(c.at("axis"), json::array());  // Keras' axis=None, its empty tuple
  EXPECT_EQ(c.at("mean"), json({1.0, 2.0}));
  const auto back = layers::find_layer_class("Normalization")->from_config(c);
  EXPECT_EQ(back->get_config(), c);
  // Keras' own config of an adapted layer: axis [-1], mean and variance null.
  const json keras = {
      {"name", "normalization"}, {"axis", {-1}}, {"invert", false}, {"mean", nullptr}, {"variance", nullptr}};
  const auto k = layers::find_layer_class("Normalization")->from_config(keras);
  EXPECT_EQ(k->get_config(), keras);
}

// Two 2x3 images of 2 channels with distinct values: x[b, i, j, c] = 100 b + 10 i + 2 j + c.
Tensor images(std::int64_t n, std::int64_t h = 2, std::int64_t w = 3) {
  std::vector<float> v;
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < h; ++i)
      for (std::int64_t j = 0; j < w; ++j)
        for (int c = 0; c < 2; ++c) v.push_back(static_cast<float>(100 * b + 10 * i + 2 * j + c));
  return Tensor::from_vector(v, {n, h, w, 2});
}

// Which of {identity, the mode's flip} each example of y is, exactly; -1 if neither.
std::vector<int> flips_of(const Tensor& y, std::int64_t n, std::int64_t h, std::int64_t w, bool hz, bool vt) {
  const auto v = y.to_vector<float>();
  std::vector<int> out;
  for (std::int64_t b = 0; b < n; ++b) {
    bool same = true, flipped = true;
    for (std::int64_t i = 0; i < h; ++i)
      for (std::int64_t j = 0; j < w; ++j)
        for (int c = 0; c < 2; ++c) {
          const float got = v[static_cast<std::size_t>(((b * h + i) * w + j) * 2 + c)];
          same = same && got == static_cast<float>(100 * b + 10 * i + 2 * j + c);
          const std::int64_t si = vt ? h - 1 - i : i, sj = hz ? w - 1 - j : j;
          flipped = flipped && got == static_cast<float>(100 * b + 10 * si + 2 * sj + c);
        }
    out.push_back(same ? 0 : flipped ? 1 : -1);
  }
  return out;
}

TEST(RandomFlip, InferenceIsTheIdentityAndTrainingFlipsWholeExamplesExactly) {
  for (const std::string mode : {"horizontal", "vertical", "horizontal_and_vertical"}) {
    const bool hz = mode != "vertical", vt = mode != "horizontal";
    auto f = layers::RandomFlip(mode);
    f->build(Shape{-1, 2, 3, 2}, 7);
    const Tensor x = images(16);
    EXPECT_EQ(f->call(x, CallContext{.training = false, .seed = 1}).to_vector<float>(), x.to_vector<float>())
        << mode;
    const auto flips =
        flips_of(f->call(x, CallContext{.training = true, .seed = 1, .step = 3}), 16, 2, 3, hz, vt);
    int flipped = 0;
    for (int k : flips) {
      EXPECT_NE(k, -1) << mode;  // each example whole: as it was, or flipped by the mode (both ways at once)
      flipped += k == 1;
    }
    EXPECT_GT(flipped, 0) << mode;
    EXPECT_LT(flipped, 16) << mode;
  }
}

// Over many examples about half are flipped; the coins repeat for the same (seed, step, example),
// change with the step, and do not depend on how the batch is split (first_example).
TEST(RandomFlip, CoinsAreFairReproducibleAndIndependentOfTheSplit) {
  auto f = layers::RandomFlip("horizontal");
  f->build(Shape{-1, 2, 3, 2}, 7);
  const std::int64_t n = 4000;
  const Tensor x = images(n);
  const auto a =
      flips_of(f->call(x, CallContext{.training = true, .seed = 5, .step = 0}), n, 2, 3, true, false);
  int flipped = 0;
  for (int k : a) flipped += k == 1;
  EXPECT_NEAR(flipped / static_cast<double>(n), 0.5, 0.03);  // 4000 fair coins: sd 0.008
  EXPECT_EQ(a,
            flips_of(f->call(x, CallContext{.training = true, .seed = 5, .step = 0}), n, 2, 3, true, false));
  EXPECT_NE(a,
            flips_of(f->call(x, CallContext{.training = true, .seed = 5, .step = 1}), n, 2, 3, true, false));
  // The second half on its own, as a second replica sees it: the same coins.
  const Tensor half = images(n).slice(n / 2, n).clone();
  const auto b = f->call(half, CallContext{.training = true, .seed = 5, .step = 0, .first_example = n / 2});
  const auto full = f->call(x, CallContext{.training = true, .seed = 5, .step = 0}).to_vector<float>();
  EXPECT_EQ(b.to_vector<float>(),
            std::vector<float>(full.begin() + static_cast<long>(full.size() / 2), full.end()));
  // A layer seed gives its own stream, the same whatever the model builds it with.
  auto s1 = layers::RandomFlip("horizontal", 42), s2 = layers::RandomFlip("horizontal", 42);
  s1->build(Shape{-1, 2, 3, 2}, 1);
  s2->build(Shape{-1, 2, 3, 2}, 2);
  const CallContext ctx{.training = true, .seed = 5, .step = 0};
  EXPECT_EQ(s1->call(x, ctx).to_vector<float>(), s2->call(x, ctx).to_vector<float>());
}

TEST(RandomFlip, ConfigRoundTripsAndBadArgumentsAreRefusedByName) {
  auto f = layers::RandomFlip("vertical", 3);
  const json c = f->get_config();
  EXPECT_EQ(c.at("mode"), "vertical");
  EXPECT_EQ(c.at("seed"), 3);
  EXPECT_EQ(layers::find_layer_class("RandomFlip")->from_config(c)->get_config(), c);
  EXPECT_EQ(layers::find_layer_class("RandomFlip")->keras_fixed.at("data_format"), "channels_last");
  EXPECT_VALUE_ERROR(layers::RandomFlip("diagonal"), "mode 'diagonal'");
  auto g = layers::RandomFlip();
  EXPECT_THROW(g->build(Shape{-1, 4, 3}, 0), ValueError);
}

// ---- RandomContrast, RandomBrightness ----

// Per image of (n, h, w, c) images: the channels' means over height and width, in double.
std::vector<double> channel_means(const std::vector<float>& v, std::int64_t n, std::int64_t hw, std::int64_t c) {
  std::vector<double> m(static_cast<std::size_t>(n * c), 0.0);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t p = 0; p < hw; ++p)
      for (std::int64_t k = 0; k < c; ++k)
        m[static_cast<std::size_t>(b * c + k)] += v[static_cast<std::size_t>((b * hw + p) * c + k)];
  for (double& x : m) x /= static_cast<double>(hw);
  return m;
}

// Each image's contrast factor (least squares of y - mean against x - mean), checked to be one
// factor for every pixel and channel of it and the channels' means kept (no value clipped).
std::vector<double> contrast_factors(const Tensor& x, const Tensor& y) {
  const std::int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), c = x.dim(3);
  const auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
  const auto mx = channel_means(xv, n, hw, c), my = channel_means(yv, n, hw, c);
  const auto at = [&](std::int64_t b, std::int64_t p, std::int64_t k) { return static_cast<std::size_t>((b * hw + p) * c + k); };
  std::vector<double> factors;
  for (std::int64_t b = 0; b < n; ++b) {
    double xy = 0, xx = 0;
    for (std::int64_t p = 0; p < hw; ++p)
      for (std::int64_t k = 0; k < c; ++k) {
        const double m = mx[static_cast<std::size_t>(b * c + k)], dx = xv[at(b, p, k)] - m;
        xy += (yv[at(b, p, k)] - m) * dx;
        xx += dx * dx;
      }
    const double f = xy / xx;
    for (std::int64_t p = 0; p < hw; ++p)
      for (std::int64_t k = 0; k < c; ++k) {
        const double m = mx[static_cast<std::size_t>(b * c + k)];
        EXPECT_NEAR(yv[at(b, p, k)] - m, f * (xv[at(b, p, k)] - m), 1e-5) << "image " << b << " pixel " << p;
      }
    for (std::int64_t k = 0; k < c; ++k)
      EXPECT_NEAR(my[static_cast<std::size_t>(b * c + k)], mx[static_cast<std::size_t>(b * c + k)], 1e-5)
          << "image " << b << " channel " << k;
    factors.push_back(f);
  }
  return factors;
}

// Pixels in [0.3, 0.7).
Tensor colour_images(std::int64_t n, std::uint64_t seed) {
  return test::random_uniform(Shape{n, 3, 4, 2}, seed, 0.3f, 0.7f);
}

TEST(RandomContrast, EachImageDrawsOneFactorWithinKerasBoundsAndKeepsItsChannelMeans) {
  // Keras 3's rule for a number f: (lower, upper) = (0, f), factors in [1, 1 + f].
  auto number = layers::RandomContrast({0.5f}, {-10.0f, 10.0f});  // a range that clips nothing
  const auto& as_contrast = dynamic_cast<const layers::RandomContrastLayer&>(*number);
  EXPECT_EQ(as_contrast.lower(), 0.0f);
  EXPECT_EQ(as_contrast.upper(), 0.5f);
  number->build(Shape{-1, 3, 4, 2}, 7);
  const std::int64_t n = 2000;
  const Tensor x = colour_images(n, 3);
  const CallContext train{.training = true, .seed = 5, .step = 2};
  EXPECT_TRUE(number->call(x, CallContext{.training = false}).bitwise_equal(x));
  for (const auto& [layer, lo, hi] :
       {std::tuple{number, 1.0, 1.5}, std::tuple{layers::RandomContrast({0.6f, 0.3f}, {-10.0f, 10.0f}), 0.7, 1.6}}) {
    layer->build(Shape{-1, 3, 4, 2}, 7);
    const auto f = contrast_factors(x, layer->call(x, train));
    double mean = 0;
    for (double v : f) {
      EXPECT_GE(v, lo - 1e-3);
      EXPECT_LE(v, hi + 1e-3);
      mean += v / static_cast<double>(n);
    }
    // Uniform on [lo, hi]: the mean within 5 standard errors, and both ends reached.
    EXPECT_NEAR(mean, (lo + hi) / 2, 5 * (hi - lo) / std::sqrt(12.0 * static_cast<double>(n)));
    EXPECT_LT(*std::min_element(f.begin(), f.end()), lo + 0.01 * (hi - lo));
    EXPECT_GT(*std::max_element(f.begin(), f.end()), hi - 0.01 * (hi - lo));
  }
}

TEST(RandomContrast, ClipsToTheValueRangeAndDrawsAsOneDeviceAnotherEachStep) {
  auto layer = layers::RandomContrast({1.0f}, {0.4f, 0.6f});
  layer->build(Shape{-1, 3, 4, 2}, 7);
  const std::int64_t n = 64;
  const Tensor x = colour_images(n, 4);
  const CallContext train{.training = true, .seed = 5, .step = 2};
  const Tensor y = layer->call(x, train);
  const auto v = y.to_vector<float>();
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), 0.4f);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 0.6f);
  // The second half alone, as a second replica sees it: the same images' factors.
  CallContext second = train;
  second.first_example = n / 2;
  const auto half = layer->call(x.slice(n / 2, n), second).to_vector<float>();
  EXPECT_EQ(half, std::vector<float>(v.begin() + static_cast<long>(v.size() / 2), v.end()));
  CallContext next = train;
  next.step = 3;
  EXPECT_FALSE(layer->call(x, next).bitwise_equal(y));
  // A layer seed gives its own stream, whatever the model builds the layer with.
  auto s1 = layers::RandomContrast({0.5f}, {0.0f, 1.0f}, 42), s2 = layers::RandomContrast({0.5f}, {0.0f, 1.0f}, 42);
  s1->build(Shape{-1, 3, 4, 2}, 1);
  s2->build(Shape{-1, 3, 4, 2}, 2);
  EXPECT_TRUE(s1->call(x, train).bitwise_equal(s2->call(x, train)));
}

TEST(RandomBrightness, EachImageGainsOneDeltaWithinTheFactorTimesTheRangeThenClipped) {
  auto layer = layers::RandomBrightness({0.2f}, {255.0f, 0.0f});  // Keras sorts the range
  const auto& as_brightness = dynamic_cast<const layers::RandomBrightnessLayer&>(*layer);
  EXPECT_EQ(as_brightness.lower(), -0.2f);
  EXPECT_EQ(as_brightness.upper(), 0.2f);
  layer->build(Shape{-1, 3, 4, 2}, 7);
  const std::int64_t n = 2000;
  const Tensor x = test::random_uniform(Shape{n, 3, 4, 2}, 5, 60.0f, 190.0f);  // 0.2 * 255 = 51 from the bounds
  const CallContext train{.training = true, .seed = 5, .step = 2};
  EXPECT_TRUE(layer->call(x, CallContext{.training = false}).bitwise_equal(x));
  const auto xv = x.to_vector<float>(), yv = layer->call(x, train).to_vector<float>();
  double mean = 0;
  for (std::int64_t b = 0; b < n; ++b) {
    const double delta = yv[static_cast<std::size_t>(b * 24)] - xv[static_cast<std::size_t>(b * 24)];
    for (std::int64_t i = 1; i < 24; ++i) {
      const auto k = static_cast<std::size_t>(b * 24 + i);
      ASSERT_NEAR(yv[k] - xv[k], delta, 1e-3) << "image " << b;
    }
    EXPECT_GE(delta, -51.0 - 1e-3);
    EXPECT_LE(delta, 51.0 + 1e-3);
    mean += delta / static_cast<double>(n);
  }
  EXPECT_NEAR(mean, 0.0, 5 * 102 / std::sqrt(12.0 * static_cast<double>(n)));
  // Clipped to the range: a delta of up to the whole range saturates some pixels.
  auto full = layers::RandomBrightness({-1.0f, 1.0f}, {0.0f, 255.0f});
  full->build(Shape{-1, 3, 4, 2}, 7);
  const auto clipped = full->call(x, train).to_vector<float>();
  EXPECT_EQ(*std::min_element(clipped.begin(), clipped.end()), 0.0f);
  EXPECT_EQ(*std::max_element(clipped.begin(), clipped.end()), 255.0f);
  // Replicas draw what one device draws.
  CallContext second = train;
  second.first_example = n / 2;
  const auto half = full->call(x.slice(n / 2, n), second).to_vector<float>();
  EXPECT_EQ(half, std::vector<float>(clipped.begin() + static_cast<long>(clipped.size() / 2), clipped.end()));
}

TEST(RandomColourLayers, ConfigsAreKerasAndBadArgumentsAreRefusedAsKeras) {
  const json contrast = layers::RandomContrast({0.2f}, {0.0f, 255.0f}, 4)->get_config();
  EXPECT_EQ(contrast.at("factor"), json::array({0.0, 0.2f}));
  EXPECT_EQ(contrast.at("value_range"), json::array({0.0, 255.0}));
  EXPECT_EQ(contrast.at("seed"), 4);
  EXPECT_EQ(layers::find_layer_class("RandomContrast")->from_config(contrast)->get_config(), contrast);
  const json brightness = layers::RandomBrightness({0.3f, -0.2f}, {1.0f, 0.0f})->get_config();
  EXPECT_EQ(brightness.at("factor"), json::array({-0.2f, 0.3f}));
  EXPECT_EQ(brightness.at("value_range"), json::array({0.0, 1.0}));
  EXPECT_TRUE(brightness.at("seed").is_null());
  EXPECT_EQ(layers::find_layer_class("RandomBrightness")->from_config(brightness)->get_config(), brightness);
  // Keras writes a number's factor as (lower, upper); a file with a bare number loads as Keras reads it.
  const auto from_number = layers::find_layer_class("RandomBrightness")
                               ->from_config({{"name", "b"}, {"factor", 0.5}, {"value_range", {0, 255}}});
  EXPECT_EQ(from_number->get_config().at("factor"), json::array({-0.5, 0.5}));
  for (const char* cls : {"RandomContrast", "RandomBrightness"})
    EXPECT_EQ(layers::find_layer_class(cls)->keras_fixed.at("data_format"), "channels_last");
  EXPECT_VALUE_ERROR(layers::RandomContrast({1.5f}),
                     "the `factor` argument should be a number (or a list of two numbers) in the range [0, 1]. "
                     "Received: factor=1.5");
  EXPECT_VALUE_ERROR(layers::RandomContrast({-0.5f}), "in the range [0, 1]");
  EXPECT_VALUE_ERROR(layers::RandomBrightness({1.2f, 1.5f}), "in the range [-1, 1]. Received: factor=(1.2, 1.5)");
  EXPECT_VALUE_ERROR(layers::RandomBrightness({0.1f, 0.2f, 0.3f}), "Received: factor=(0.1, 0.2, 0.3)");
  EXPECT_VALUE_ERROR(layers::RandomBrightness({0.1f}, {0.0f}), "`value_range` argument should be a list of two");
  EXPECT_VALUE_ERROR(layers::RandomContrast({0.1f}, {1.0f, 0.0f}), "value_range (1, 0) must be (low, high)");
  auto unbatched = layers::RandomContrast({0.1f});
  EXPECT_VALUE_ERROR(unbatched->build(Shape{4, 4, 3}, 0), "needs batched images");
}

// The image layers' shared config readers (image_layer_args, random_draws): a seed must be an
// integer (Keras' SeedGenerator refuses 0.5 and "x" with this message), a factor a number or a
// list of numbers, for every family that reads them; an integer seed round-trips.
TEST(ImageLayerConfigs, SeedsAndFactorsAreReadOnceAndRefusedAsKeras) {
  const std::vector<std::pair<std::string, json>> files = {
      {"RandomFlip", {{"name", "f"}, {"mode", "horizontal"}}},
      {"RandomContrast", {{"name", "c"}, {"factor", 0.2}, {"value_range", {0, 1}}}},
      {"RandomRotation", {{"name", "r"}, {"factor", 0.1}}},
  };
  for (const auto& [cls, base] : files) {
    const auto row = layers::find_layer_class(cls);
    ASSERT_TRUE(row.has_value()) << cls;
    json seeded = base;
    seeded["seed"] = 42;
    EXPECT_EQ(row->from_config(seeded)->get_config().at("seed"), 42) << cls;
    for (const json& bad : {json(0.5), json("x"), json::array({1}), json(std::uint64_t{1} << 63)}) {
      json c = base;
      c["seed"] = bad;
      EXPECT_VALUE_ERROR(row->from_config(c), "Argument `seed` must be an integer. Received: seed=" + bad.dump());
    }
  }
  for (const char* cls : {"RandomContrast", "RandomRotation"}) {
    json c = files[cls == std::string("RandomContrast") ? 1 : 2].second;
    for (const json& bad : {json("bogus"), json::array({0.1, "x"}), json::object()}) {
      c["factor"] = bad;
      EXPECT_VALUE_ERROR(layers::find_layer_class(cls)->from_config(c),
                         std::string(cls) + ": `factor` must be a number or a list of two numbers");
    }
  }
}

// TensorFlow's bilinear resize of one axis (half-pixel centres, float as TensorFlow): what the
// test expects, written out from its definition.
std::vector<double> resize_1d(const std::vector<double>& v, std::int64_t out) {
  const auto in = static_cast<std::int64_t>(v.size());
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<double> r;
  for (std::int64_t i = 0; i < out; ++i) {
    const float s = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const auto lo = std::max<std::int64_t>(static_cast<std::int64_t>(std::floor(s)), 0);
    const auto hi = std::min<std::int64_t>(static_cast<std::int64_t>(std::ceil(s)), in - 1);
    const double t = s - std::floor(s);
    r.push_back(v[static_cast<std::size_t>(lo)] +
                (v[static_cast<std::size_t>(hi)] - v[static_cast<std::size_t>(lo)]) * t);
  }
  return r;
}

// Bilinear down (4 -> 3) and up (3 -> 5) on a separable image x[i, j] = a[i] * 10 + b[j]: the
// resize of each axis, as TensorFlow's separable resize; nearest picks floor((i + 0.5) * in / out).
TEST(Resizing, BilinearAndNearestAsTensorFlowsHalfPixelResize) {
  const std::vector<double> rows = {0, 1, 4, 9}, cols = {2, -1, 5};
  std::vector<float> v;
  for (double r : rows)
    for (double c : cols) v.push_back(static_cast<float>(r * 10 + c));
  const Tensor x = Tensor::from_vector(v, {1, 4, 3, 1});
  auto bilinear = layers::Resizing(3, 5);
  EXPECT_EQ(bilinear->compute_output_shape(Shape{-1, 4, 3, 1}), (Shape{-1, 3, 5, 1}));
  const auto y = bilinear->call(x, CallContext{}).to_vector<float>();
  const auto rr = resize_1d(rows, 3), cc = resize_1d(cols, 5);
  ASSERT_EQ(y.size(), 15u);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 5; ++j) EXPECT_NEAR(y[i * 5 + j], rr[i] * 10 + cc[j], 1e-4) << i << " " << j;
  // Nearest, 4 -> 3 rows: floor(0.5 * 4/3) = 0, floor(1.5 * 4/3) = 2, floor(2.5 * 4/3) = 3; 3 -> 5
  // columns: floor((j + 0.5) * 0.6) = 0, 0, 1, 2, 2.
  const auto yn = layers::Resizing(3, 5, "nearest")->call(x, CallContext{}).to_vector<float>();
  const std::size_t ri[] = {0, 2, 3}, cj[] = {0, 0, 1, 2, 2};
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 5; ++j) EXPECT_EQ(yn[i * 5 + j], v[ri[i] * 3 + cj[j]]) << i << " " << j;
  // crop_to_aspect_ratio: the 4x3 image to a square takes its centre 3x3 (rows 0..2), then resizes.
  const auto yc = layers::Resizing(3, 3, "bilinear", true)->call(x, CallContext{}).to_vector<float>();
  EXPECT_EQ(yc, std::vector<float>(v.begin(), v.begin() + 9));
  EXPECT_VALUE_ERROR(layers::Resizing(3, 3, "gaussian"), "interpolation 'gaussian'");
  EXPECT_EQ(layers::find_layer_class("Resizing")->keras_fixed.value("fill_mode", json()), json("constant"));
  const json c = layers::Resizing(3, 5, "nearest", true)->get_config();
  EXPECT_EQ(layers::find_layer_class("Resizing")->from_config(c)->get_config(), c);
}

// pad_to_aspect_ratio (Keras' TensorFlow backend, image.py resize): the images padded with
// fill_value on both sides of one axis by the same number of pixels, int((pad - in) / 2) with pad
// the size the target's aspect ratio asks for, then resized. Nearest to the padded size shows the
// padding as it is.
TEST(Resizing, PadToAspectRatioPadsBothSidesWithFillValueAsKeras) {
  const Tensor x = images(1, 3, 2);  // 3 rows, 2 columns, 2 channels
  const auto v = x.to_vector<float>();
  const auto pixel = [&](std::size_t i, std::size_t j, std::size_t ch) { return v[(i * 2 + j) * 2 + ch]; };
  // Target 3 x 6 (ratio 2): width pad = int(3 * 6 / 3) = 6, 2 columns each side.
  layers::ResizingOptions o{.height = 3, .width = 6, .interpolation = "nearest", .pad_to_aspect_ratio = true,
                            .fill_value = -1.5f};
  const auto y = layers::Resizing(o)->call(x, CallContext{}).to_vector<float>();
  ASSERT_EQ(y.size(), 36u);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 6; ++j)
      for (std::size_t ch = 0; ch < 2; ++ch)
        EXPECT_EQ(y[(i * 6 + j) * 2 + ch], j < 2 || j >= 4 ? -1.5f : pixel(i, j - 2, ch)) << i << " " << j;
  // Target 10 x 2 (rows): pad height int(2 * 10 / 2) = 10, int((10 - 3) / 2) = 3 rows each side,
  // 9 rows in all (Keras' rule, one short of the ratio), resized (nearest) to 10.
  o = {.height = 10, .width = 2, .interpolation = "nearest", .pad_to_aspect_ratio = true};
  const auto z = layers::Resizing(o)->call(x, CallContext{}).to_vector<float>();
  ASSERT_EQ(z.size(), 40u);
  for (std::size_t i = 0; i < 10; ++i) {
    const auto row = static_cast<std::size_t>(std::floor((static_cast<double>(i) + 0.5) * 0.9));  // of 9
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t ch = 0; ch < 2; ++ch)
        EXPECT_EQ(z[(i * 2 + j) * 2 + ch], row < 3 || row >= 6 ? 0.0f : pixel(row - 3, j, ch)) << i << " " << j;
  }
  // The ratio already right: no padding, the plain resize.
  o = {.height = 6, .width = 4, .pad_to_aspect_ratio = true, .fill_value = 9.0f};
  EXPECT_EQ(layers::Resizing(o)->call(x, CallContext{}).to_vector<float>(),
            layers::Resizing(6, 4)->call(x, CallContext{}).to_vector<float>());
  // Both ways is refused, as Keras refuses it; the config crosses both ways.
  o.crop_to_aspect_ratio = true;
  EXPECT_VALUE_ERROR(layers::Resizing(o), "only one of pad_to_aspect_ratio and crop_to_aspect_ratio");
  o = {.height = 3, .width = 6, .pad_to_aspect_ratio = true, .fill_value = 0.5f, .antialias = true};
  const json c = layers::Resizing(o)->get_config();
  EXPECT_EQ(c.at("fill_value"), 0.5);
  EXPECT_EQ(c.at("antialias"), true);
  EXPECT_EQ(layers::find_layer_class("Resizing")->from_config(c)->get_config(), c);
}

TEST(CenterCrop, TakesTheCentreAsKerasAndRefusesSmallerImages) {
  const Tensor x = images(2, 5, 4);  // 5x4 -> 2x3: rows from (5 - 2) // 2 = 1, columns from 0
  auto crop = layers::CenterCrop(2, 3);
  const auto y = crop->call(x, CallContext{}).to_vector<float>();
  std::vector<float> want;
  for (int b = 0; b < 2; ++b)
    for (int i = 1; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        for (int c = 0; c < 2; ++c) want.push_back(static_cast<float>(100 * b + 10 * i + 2 * j + c));
  EXPECT_EQ(y, want);
  EXPECT_VALUE_ERROR(crop->compute_output_shape(Shape{-1, 1, 4, 2}), "smaller than the crop");
  const json c = crop->get_config();
  EXPECT_EQ(layers::find_layer_class("CenterCrop")->from_config(c)->get_config(), c);
}

}  // namespace
}  // namespace lockstep
