// Keras 3's other regularization layers (SpatialDropout1D / 2D / 3D, GaussianNoise, GaussianDropout,
// AlphaDropout, Identity) and normalisations (GroupNormalization, UnitNormalization): their
// formulas worked out by hand, training against inference, the statistics of their draws, the
// keying that makes a split batch draw what the whole one does, refusals, and configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/group_normalization.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/layers/regularization_layers.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using nlohmann::json;
using test::message_of;

const CallContext kTrain{.training = true, .seed = 11, .step = 3};

layers::LayerPtr built(layers::LayerPtr layer, const Shape& input) {
  std::vector<std::int64_t> dims = input.dims();
  dims[0] = -1;
  layer->build(Shape(std::move(dims)), 5);
  return layer;
}

struct Moments {
  double mean = 0, stddev = 0, within_one_stddev = 0;  // the last: the fraction within one stddev of the mean
};
Moments moments_of(const std::vector<float>& v) {
  Moments m;
  for (float x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (float x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size()));
  for (float x : v) m.within_one_stddev += std::fabs(x - m.mean) <= m.stddev ? 1.0 : 0.0;
  m.within_one_stddev /= static_cast<double>(v.size());
  return m;
}

// The layer's training call on x, and on x's rows split in two at `at` (the second part's
// first_example moved on, as a replica's): a split batch draws what the whole one draws.
void expect_split_draws_the_same(const layers::Layer& layer, const Tensor& x, std::int64_t at) {
  const Tensor whole = layer.call(x, kTrain);
  CallContext second = kTrain;
  second.first_example = at;
  const auto a = layer.call(x.slice(0, at), kTrain).to_vector<float>();
  const auto b = layer.call(x.slice(at, x.dim(0)), second).to_vector<float>();
  std::vector<float> joined = a;
  joined.insert(joined.end(), b.begin(), b.end());
  EXPECT_EQ(joined, whole.to_vector<float>()) << layer.class_name();
}

// Every one of them is the identity in inference, bit for bit, and keeps its input's mask.
TEST(RegularizationLayers, AreTheIdentityInInference) {
  const Tensor x = test::random_uniform(Shape{4, 3, 2, 5}, 1);
  for (const auto& layer : {layers::SpatialDropout2D(0.5f), layers::GaussianNoise(0.7f), layers::GaussianDropout(0.5f),
                            layers::AlphaDropout(0.5f), layers::Identity()}) {
    built(layer, x.shape());
    EXPECT_TRUE(layer->call(x, CallContext{.training = false, .seed = 11, .step = 3}).bitwise_equal(x))
        << layer->class_name();
    EXPECT_TRUE(layer->supports_masking()) << layer->class_name();
    EXPECT_EQ(layer->count_params(), 0) << layer->class_name();
  }
  const Tensor seq = test::random_uniform(Shape{4, 3, 2}, 2);
  EXPECT_TRUE(built(layers::SpatialDropout1D(0.5f), seq.shape())->call(seq, CallContext{}).bitwise_equal(seq));
}

// SpatialDropout1D on (batch, steps, channels): one draw per (example, channel), kept for every
// step, about `rate` of them dropped, the kept scaled by 1 / (1 - rate); a new step draws anew.
TEST(SpatialDropout1D, DropsWholeChannelsAboutRateAndScalesTheRest) {
  const float rate = 0.3f;
  const Tensor x = Tensor::full({200, 7, 30}, 2.0);
  auto layer = built(layers::SpatialDropout1D(rate), x.shape());
  const auto y = layer->call(x, kTrain).to_vector<float>();
  std::size_t dropped = 0;
  for (std::int64_t b = 0; b < 200; ++b)
    for (std::int64_t c = 0; c < 30; ++c) {
      const float first = y[static_cast<std::size_t>(b * 7 * 30 + c)];
      if (first == 0.0f) ++dropped;
      else EXPECT_NEAR(first, 2.0f / (1.0f - rate), 1e-6);
      for (std::int64_t t = 1; t < 7; ++t) ASSERT_EQ(y[static_cast<std::size_t>((b * 7 + t) * 30 + c)], first);
    }
  EXPECT_NEAR(static_cast<double>(dropped) / (200.0 * 30.0), rate, 0.03);
  CallContext next = kTrain;
  next.step = 4;
  EXPECT_NE(layer->call(x, next).to_vector<float>(), y);
  EXPECT_EQ(layer->call(x, kTrain).to_vector<float>(), y);
  expect_split_draws_the_same(*layer, x, 77);
}

TEST(SpatialDropout2D, DropsWholeFeatureMapsInEitherDataFormat) {
  const float rate = 0.5f;
  for (const std::string format : {"channels_last", "channels_first"}) {
    const bool last = format == "channels_last";
    const Tensor x = last ? Tensor::ones({100, 3, 4, 8}) : Tensor::ones({100, 8, 3, 4});
    auto layer = built(layers::SpatialDropout2D(rate, format), x.shape());
    const auto y = layer->call(x, kTrain).to_vector<float>();
    std::size_t dropped = 0;
    for (std::int64_t b = 0; b < 100; ++b)
      for (std::int64_t c = 0; c < 8; ++c) {
        const auto at = [&](std::int64_t h, std::int64_t w) {
          return y[static_cast<std::size_t>(last ? ((b * 3 + h) * 4 + w) * 8 + c : ((b * 8 + c) * 3 + h) * 4 + w)];
        };
        const float first = at(0, 0);
        if (first == 0.0f) ++dropped;
        else EXPECT_EQ(first, 2.0f);
        for (std::int64_t h = 0; h < 3; ++h)
          for (std::int64_t w = 0; w < 4; ++w) ASSERT_EQ(at(h, w), first) << format;
      }
    EXPECT_NEAR(static_cast<double>(dropped) / 800.0, rate, 0.06) << format;
    expect_split_draws_the_same(*layer, x, 31);
  }
}

// Keras' SpatialDropout3D noise shape: (batch, 1, 1, 1, channels) or (batch, channels, 1, 1, 1).
TEST(SpatialDropout3D, DropsWholeVolumesInEitherDataFormat) {
  const float rate = 0.25f;
  std::vector<std::vector<float>> masks;  // per format: the (example, channel) values
  for (const std::string format : {"channels_last", "channels_first"}) {
    const bool last = format == "channels_last";
    std::vector<float> mask;
    const std::int64_t n = 60, d = 2, h = 3, w = 2, ch = 5;
    const Tensor x = last ? Tensor::ones({n, d, h, w, ch}) : Tensor::ones({n, ch, d, h, w});
    auto layer = built(layers::SpatialDropout3D(rate, format), x.shape());
    const auto y = layer->call(x, kTrain).to_vector<float>();
    std::size_t dropped = 0;
    for (std::int64_t b = 0; b < n; ++b)
      for (std::int64_t c = 0; c < ch; ++c) {
        const auto at = [&](std::int64_t i) {  // i: the (d, h, w) position, row-major
          return y[static_cast<std::size_t>(last ? (b * d * h * w + i) * ch + c : (b * ch + c) * d * h * w + i)];
        };
        const float first = at(0);
        mask.push_back(first);
        if (first == 0.0f) ++dropped;
        else EXPECT_EQ(first, 1.0f / (1.0f - rate));
        for (std::int64_t i = 0; i < d * h * w; ++i) ASSERT_EQ(at(i), first) << format;
      }
    EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(n * ch), rate, 0.08) << format;
    masks.push_back(std::move(mask));
    expect_split_draws_the_same(*layer, x, 17);
  }
  // The mask is Dropout's for the unit (example, channel), whichever axis holds the channels.
  EXPECT_EQ(masks[0], masks[1]);
  EXPECT_NE(message_of([] { built(layers::SpatialDropout3D(0.5f), Shape{4, 3, 2, 2}); }).find("expected ndim=5"),
            std::string::npos);
  EXPECT_TRUE(built(layers::SpatialDropout3D(0.5f), Shape{2, 2, 2, 2, 3})
                  ->call(Tensor::ones({2, 2, 2, 2, 3}), CallContext{.training = false})
                  .bitwise_equal(Tensor::ones({2, 2, 2, 2, 3})));
}

TEST(SpatialDropout, RefusesOtherRanksRatesAndFormatsByName) {
  EXPECT_NE(message_of([] { built(layers::SpatialDropout1D(0.5f), Shape{4, 3}); }).find("expected ndim=3, found ndim=2"),
            std::string::npos);
  EXPECT_NE(message_of([] { built(layers::SpatialDropout2D(0.5f), Shape{4, 3, 2}); }).find("expected ndim=4"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)layers::SpatialDropout1D(1.0f); }).find("rate must be in [0, 1)"), std::string::npos);
  EXPECT_NE(message_of([] { (void)layers::SpatialDropout2D(0.5f, "channels_middle"); }).find("data_format"),
            std::string::npos);
}

// GaussianNoise adds N(0, stddev^2) noise: over 100,000 draws the mean, the deviation and the
// share within one deviation (0.6827 for a normal) are the normal's.
TEST(GaussianNoise, AddsZeroMeanNormalNoiseOfTheDeviation) {
  const float stddev = 0.5f;
  const Tensor x = Tensor::full({400, 250}, 3.0);
  auto layer = built(layers::GaussianNoise(stddev), x.shape());
  auto y = layer->call(x, kTrain).to_vector<float>();
  for (float& v : y) v -= 3.0f;
  const Moments m = moments_of(y);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.stddev, stddev, 0.01);
  EXPECT_NEAR(m.within_one_stddev, 0.6827, 0.01);
  // Neighbouring units and the steps draw apart: no correlation between unit u and u + 1.
  double corr = 0;
  for (std::size_t i = 0; i + 1 < y.size(); ++i) corr += y[i] * y[i + 1];
  EXPECT_NEAR(corr / static_cast<double>(y.size()) / (stddev * stddev), 0.0, 0.02);
  CallContext next = kTrain;
  next.step = 4;
  EXPECT_NE(layer->call(x, next).to_vector<float>(), layer->call(x, kTrain).to_vector<float>());
  expect_split_draws_the_same(*layer, x, 123);
  EXPECT_TRUE(built(layers::GaussianNoise(0.0f), x.shape())->call(x, kTrain).bitwise_equal(x));
}

TEST(GaussianNoise, RefusesADeviationOutsideZeroToOneAsKeras) {
  EXPECT_NE(message_of([] { (void)layers::GaussianNoise(1.5f); })
                .find("Expected a float value between 0 and 1. Received: stddev=1.5"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)layers::GaussianNoise(-0.1f); }).find("stddev"), std::string::npos);
}

// GaussianDropout multiplies by N(1, rate / (1 - rate)): x = 3 gives mean 3, deviation 3 * 0.5 at rate 0.2.
TEST(GaussianDropout, MultipliesByOneCentredNormalNoise) {
  const Tensor x = Tensor::full({400, 250}, 3.0);
  auto layer = built(layers::GaussianDropout(0.2f), x.shape());
  const Moments m = moments_of(layer->call(x, kTrain).to_vector<float>());
  EXPECT_NEAR(m.mean, 3.0, 0.02);
  EXPECT_NEAR(m.stddev, 1.5, 0.02);
  EXPECT_NEAR(m.within_one_stddev, 0.6827, 0.01);
  expect_split_draws_the_same(*layer, x, 50);
  EXPECT_NE(message_of([] { (void)layers::GaussianDropout(1.0f); }).find("rate must be in [0, 1)"), std::string::npos);
}

// AlphaDropout: a kept unit is a * x + b, a dropped one a * alpha_p + b (Keras' constants, worked
// out here from SELU's alpha and scale); about `rate` dropped; standard normal inputs keep a mean
// of 0 and a deviation of 1, the layer's purpose.
TEST(AlphaDropout, KeepsMeanAndVarianceWithKerasConstants) {
  const double rate = 0.2, alpha_p = -1.6732632423543772 * 1.0507009873554805;
  const double a = 1.0 / std::sqrt((1 - rate) * (1 + rate * alpha_p * alpha_p)), b = -a * alpha_p * rate;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(400 * 250);
  for (auto& e : v) e = normal(rng);
  const Tensor x = Tensor::from_vector(v, {400, 250});
  auto layer = built(layers::AlphaDropout(static_cast<float>(rate)), x.shape());
  const auto y = layer->call(x, kTrain).to_vector<float>();
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::fabs(y[i] - (a * alpha_p + b)) < 1e-6) ++dropped;
    else ASSERT_NEAR(y[i], a * v[i] + b, 1e-5) << i;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(v.size()), rate, 0.01);
  const Moments m = moments_of(y);
  EXPECT_NEAR(m.mean, 0.0, 0.02);
  EXPECT_NEAR(m.stddev, 1.0, 0.02);
  expect_split_draws_the_same(*layer, x, 99);
}

// noise_shape (None, 1, features): one draw per (example, feature), shared by the steps.
TEST(AlphaDropout, NoiseShapeSharesADrawAlongItsOnes) {
  const Tensor x = Tensor::ones({50, 4, 6});
  auto layer = built(layers::AlphaDropout(0.5f, {-1, 1, 6}), x.shape());
  const auto y = layer->call(x, kTrain).to_vector<float>();
  for (std::int64_t e = 0; e < 50; ++e)
    for (std::int64_t f = 0; f < 6; ++f)
      for (std::int64_t t = 1; t < 4; ++t)
        ASSERT_EQ(y[static_cast<std::size_t>((e * 4 + t) * 6 + f)], y[static_cast<std::size_t>(e * 4 * 6 + f)]);
  EXPECT_NE(message_of([] { (void)layers::AlphaDropout(0.5f, {1, 1, 6}); }).find("batch entry must be None"),
            std::string::npos);
  EXPECT_NE(message_of([] { built(layers::AlphaDropout(0.5f, {-1, 3, 6}), Shape{2, 4, 6}); }).find("does not broadcast"),
            std::string::npos);
}

// ---- Dropout's noise_shape (Keras': the mask's shape, broadcast over the input) ----

// (None, 1, C): whole channels dropped over time, each example its own; (None, 1, 1): whole
// examples. A noise_shape that leaves every entry None draws what Dropout without one draws.
TEST(Dropout, NoiseShapeDrawsOneMaskOfItsShapeBroadcastOverTheInput) {
  const Tensor x = test::random_uniform(Shape{40, 5, 6}, 3, 1.0f, 2.0f);
  const auto check_shared = [&](const std::vector<std::int64_t>& noise, bool per_feature) {
    auto layer = built(layers::Dropout(0.5f, noise), x.shape());
    const auto y = layer->call(x, kTrain).to_vector<float>(), xv = x.to_vector<float>();
    int dropped = 0;
    for (std::int64_t e = 0; e < 40; ++e)
      for (std::int64_t t = 0; t < 5; ++t)
        for (std::int64_t f = 0; f < 6; ++f) {
          const auto i = static_cast<std::size_t>((e * 5 + t) * 6 + f);
          const auto first = static_cast<std::size_t>(e * 30 + (per_feature ? f : 0));
          const bool kept = y[i] != 0.0f, first_kept = y[first] != 0.0f;
          ASSERT_EQ(kept, first_kept) << "example " << e << " step " << t << " feature " << f;
          if (kept) {
            ASSERT_EQ(y[i], xv[i] * 2.0f);
          } else {
            ++dropped;
          }
        }
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, 40 * 30);
    expect_split_draws_the_same(*layer, x, 15);
  };
  check_shared({-1, 1, 6}, true);
  check_shared({-1, 1, 1}, false);
  // Every entry None: Dropout's own mask.
  EXPECT_TRUE(built(layers::Dropout(0.5f, {-1, -1, -1}), x.shape())
                  ->call(x, kTrain)
                  .bitwise_equal(built(layers::Dropout(0.5f), x.shape())->call(x, kTrain)));
  // Keras refuses entries that are not positive; lockstep also a batch entry (replicas would not
  // agree) and, at build, a shape that does not broadcast (Keras fails in its call).
  EXPECT_NE(message_of([] { (void)layers::Dropout(0.5f, {-1, 0, 6}); }).find("positive integers or None"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)layers::Dropout(0.5f, {1, 1, 6}); }).find("batch entry must be None"),
            std::string::npos);
  // An entry that is not an integer (Keras refuses it; a truncation would drop other units).
  const auto noise_config = [](json noise) {
    json c = layers::Dropout(0.5f)->get_config();
    c["noise_shape"] = std::move(noise);
    return c;
  };
  const auto dropout = layers::find_layer_class("Dropout");
  EXPECT_NE(message_of([&] { (void)dropout->from_config(noise_config({nullptr, 1.5, 6})); })
                .find("expected all elements to be integers or None, entry 1 is 1.5"),
            std::string::npos);
  EXPECT_NE(message_of([&] { (void)dropout->from_config(noise_config({nullptr, "1", 6})); }).find("entry 1"),
            std::string::npos);
  EXPECT_EQ(dropout->from_config(noise_config({nullptr, 1, 6}))->get_config().at("noise_shape"),
            json::array({nullptr, 1, 6}));
  EXPECT_NE(message_of([] { built(layers::Dropout(0.5f, {-1, 2, 6}), Shape{2, 5, 6}); }).find("does not broadcast"),
            std::string::npos);
  EXPECT_NE(message_of([] { built(layers::Dropout(0.5f, {-1, 1}), Shape{2, 5, 6}); }).find("noise_shape has 2 entries"),
            std::string::npos);
}

// ---- Keras' seed argument: the layer's own stream of draws ----

// Every regularization layer: a seed draws the same masks whatever the model's seed and the
// layer's build seed, another seed other masks; without one the model's seeds key them.
TEST(RegularizationLayers, ASeedIsTheLayersOwnStreamWhateverTheModelsSeed) {
  using Make = std::function<layers::LayerPtr(std::optional<std::int64_t>)>;
  const std::vector<std::pair<Shape, Make>> cases = {
      {Shape{8, 5, 6}, [](auto s) { return layers::Dropout(0.5f, {}, s); }},
      {Shape{8, 5, 6}, [](auto s) { return layers::Dropout(0.5f, {-1, 1, 6}, s); }},
      {Shape{8, 5, 6}, [](auto s) { return layers::SpatialDropout1D(0.5f, s); }},
      {Shape{8, 3, 3, 4}, [](auto s) { return layers::SpatialDropout2D(0.5f, "channels_last", s); }},
      {Shape{8, 2, 2, 2, 4}, [](auto s) { return layers::SpatialDropout3D(0.5f, "channels_first", s); }},
      {Shape{8, 6}, [](auto s) { return layers::GaussianNoise(0.5f, s); }},
      {Shape{8, 6}, [](auto s) { return layers::GaussianDropout(0.5f, s); }},
      {Shape{8, 6}, [](auto s) { return layers::AlphaDropout(0.5f, {}, s); }},
  };
  for (const auto& [shape, make] : cases) {
    const Tensor x = test::random_uniform(shape, 9, 1.0f, 2.0f);
    const auto draw = [&](std::optional<std::int64_t> seed, std::uint64_t build_seed, std::uint64_t model_seed) {
      auto layer = make(seed);
      std::vector<std::int64_t> dims = shape.dims();
      dims[0] = -1;
      layer->build(Shape(dims), build_seed);
      return layer->call(x, CallContext{.training = true, .seed = model_seed, .step = 2});
    };
    const std::string cls = make(std::nullopt)->class_name();
    const Tensor own = draw(42, 1, 11);
    EXPECT_TRUE(draw(42, 2, 12).bitwise_equal(own)) << cls;
    EXPECT_FALSE(draw(43, 1, 11).bitwise_equal(own)) << cls;
    EXPECT_FALSE(draw(std::nullopt, 1, 11).bitwise_equal(draw(std::nullopt, 2, 11))) << cls;
    EXPECT_FALSE(draw(std::nullopt, 1, 11).bitwise_equal(draw(std::nullopt, 1, 12))) << cls;
    // Keras' config: the seed, or null.
    EXPECT_EQ(make(42)->get_config().at("seed"), 42) << cls;
    EXPECT_TRUE(make(std::nullopt)->get_config().at("seed").is_null()) << cls;
    const json c = make(42)->get_config();
    EXPECT_EQ(layers::find_layer_class(cls)->from_config(c)->get_config(), c) << cls;
  }
}

// ---- GroupNormalization ----

// (1, 2, 4): steps (1, 2, 3, 6) and (0, 0, 4, 4), 2 groups of 2 channels: group 0 holds 1, 2, 0, 0
// (mean 0.75, variance 0.6875), group 1 holds 3, 6, 4, 4 (mean 4.25, variance 1.1875).
TEST(GroupNormalization, NormalisesEachGroupOverItsChannelsAndSteps) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 6, 0, 0, 4, 4}, {1, 2, 4});
  auto made = built(layers::GroupNormalization({.groups = 2, .epsilon = 0.5f}), x.shape());
  auto& gn = dynamic_cast<layers::GroupNormalizationLayer&>(*made);
  EXPECT_EQ(gn.count_params(), 8);  // gamma and beta, one per channel
  gn.gamma().assign(Tensor::from_vector<float>({1, 2, 3, 4}, {4}));
  gn.beta().assign(Tensor::from_vector<float>({0, -1, 1, 0.5f}, {4}));
  const auto y = gn.call(x, CallContext{}).to_vector<float>();
  const auto xs = x.to_vector<float>();
  const double mean[] = {0.75, 4.25}, var[] = {0.6875, 1.1875}, g[] = {1, 2, 3, 4}, b[] = {0, -1, 1, 0.5};
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::size_t c = i % 4, group = c / 2;
    EXPECT_NEAR(y[i], (xs[i] - mean[group]) / std::sqrt(var[group] + 0.5) * g[c] + b[c], 1e-5) << i;
  }
  // Training computes the same (no batch statistics).
  EXPECT_TRUE(gn.call(x, kTrain).bitwise_equal(gn.call(x, CallContext{})));
}

// axis=1 (channels_first) on (1, 4, 2): channels (1, 3), (5, 7), (2, 2), (0, 8); 2 groups: group
// 0 = 1, 3, 5, 7 (mean 4, variance 5), group 1 = 2, 2, 0, 8 (mean 3, variance 9); groups=-1: each
// channel its own group (instance normalisation).
TEST(GroupNormalization, TakesAnyAxisAfterTheBatchAndInstanceNormalisation) {
  const Tensor x = Tensor::from_vector<float>({1, 3, 5, 7, 2, 2, 0, 8}, {1, 4, 2});
  const auto xs = x.to_vector<float>();
  const auto y = built(layers::GroupNormalization({.groups = 2, .axis = 1}), x.shape())->call(x, {}).to_vector<float>();
  const double mean[] = {4, 3}, var[] = {5, 9};
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(y[i], (xs[i] - mean[i / 4]) / std::sqrt(var[i / 4] + 1e-3), 1e-5) << i;
  const auto inst =
      built(layers::GroupNormalization({.groups = -1, .axis = 1}), x.shape())->call(x, {}).to_vector<float>();
  const double cmean[] = {2, 6, 2, 4}, cvar[] = {1, 1, 0, 16};
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_NEAR(inst[i], (xs[i] - cmean[i / 2]) / std::sqrt(cvar[i / 2] + 1e-3), 1e-4) << i;
}

TEST(GroupNormalization, RefusesGroupsThatDoNotDivideTheChannelsWithKerasMessages) {
  EXPECT_NE(message_of([] { built(layers::GroupNormalization({.groups = 3}), Shape{2, 5, 4}); })
                .find("Number of groups (3) must be a multiple of the number of channels (4)."),
            std::string::npos);
  EXPECT_NE(message_of([] { built(layers::GroupNormalization({.groups = 8}), Shape{2, 4}); })
                .find("Number of groups (8) cannot be more than the number of channels (4)."),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)layers::GroupNormalization({.groups = 0}); })
                .find("expected a positive integer (or `-1` for instance normalization). Received: groups=0"),
            std::string::npos);
  EXPECT_NE(message_of([] { built(layers::GroupNormalization({.groups = 1, .axis = 0}), Shape{2, 4}); })
                .find("is the batch's"),
            std::string::npos);
}

TEST(GroupNormalization, MixedPrecisionComputesInFloat32AndReturnsTheComputeDtype) {
  auto gn = layers::GroupNormalization({.groups = 2});
  gn->set_dtype_policy(mixed_precision::Policy("mixed_float16"));
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 6, 0, 0, 4, 4}, {1, 2, 4});
  built(gn, x.shape());
  const Tensor y = gn->call(x.to(DType::kF16), CallContext{});
  EXPECT_EQ(y.dtype(), DType::kF16);
  EXPECT_EQ(gn->variables()[0].value().dtype(), DType::kF32);
  const auto want = built(layers::GroupNormalization({.groups = 2}), x.shape())->call(x, {}).to_vector<float>();
  const auto got = y.to(DType::kF32).to_vector<float>();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-3) << i;
}

// ---- UnitNormalization ----

TEST(UnitNormalization, ScalesEachExampleToUnitNormOverItsAxes) {
  const Tensor x = Tensor::from_vector<float>({3, 4, 0, 0}, {2, 2});
  auto layer = built(layers::UnitNormalization(), x.shape());
  const auto expect_near = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  };
  expect_near(layer->call(x, {}).to_vector<float>(), {0.6f, 0.8f, 0.0f, 0.0f});
  // An all-zero example stays zero, with a finite gradient (Keras' min(rsqrt, 1e12) bound).
  const Tensor watched = x.clone();
  GradientTape tape;
  tape.watch(watched);
  const auto g = tape.gradient(sum(layer->call(watched, {})), std::vector<Tensor>{watched})[0].to_vector<float>();
  for (float v : g) EXPECT_TRUE(std::isfinite(v));
  // Over axes 1 and 2 of (1, 2, 2): the four values' norm, 5 for (1, 2, 2, 4).
  const Tensor cube = Tensor::from_vector<float>({1, 2, 2, 4}, {1, 2, 2});
  const auto y = built(layers::UnitNormalization({1, 2}), cube.shape())->call(cube, {}).to_vector<float>();
  expect_near(y, {0.2f, 0.4f, 0.4f, 0.8f});
  EXPECT_NE(message_of([] { built(layers::UnitNormalization({3}), Shape{2, 4}); }).find("out of bounds"),
            std::string::npos);
}

// ---- configurations: Keras' names, and from_config makes the same layer again ----

TEST(RegularizationAndNormalizationConfigs, RoundTripThroughTheRegistryWithKerasNames) {
  const std::vector<std::pair<layers::LayerPtr, json>> cases = {
      {layers::SpatialDropout1D(0.25f), {{"rate", 0.25}}},
      {layers::SpatialDropout2D(0.5f, "channels_first"), {{"rate", 0.5}, {"data_format", "channels_first"}}},
      {layers::SpatialDropout3D(0.5f, "channels_first"), {{"rate", 0.5}, {"data_format", "channels_first"}}},
      {layers::SpatialDropout3D(0.25f), {{"rate", 0.25}, {"data_format", "channels_last"}}},
      {layers::GaussianNoise(0.125f), {{"stddev", 0.125}}},
      {layers::GaussianDropout(0.375f), {{"rate", 0.375}}},
      {layers::AlphaDropout(0.25f, {-1, 1, 4}), {{"rate", 0.25}, {"noise_shape", json::array({nullptr, 1, 4})}}},
      {layers::AlphaDropout(0.25f), {{"rate", 0.25}, {"noise_shape", nullptr}}},
      {layers::Dropout(0.25f, {-1, 1, 4}, 7),
       {{"rate", 0.25}, {"noise_shape", json::array({nullptr, 1, 4})}, {"seed", 7}}},
      {layers::Dropout(0.25f), {{"rate", 0.25}, {"noise_shape", nullptr}, {"seed", nullptr}}},
      {layers::Identity(), json::object()},
      {layers::GroupNormalization({.groups = 4, .axis = 1, .epsilon = 0.5f, .center = false}),
       {{"groups", 4}, {"axis", 1}, {"epsilon", 0.5}, {"center", false}, {"scale", true}}},
      {layers::UnitNormalization(), {{"axis", -1}}},
      {layers::UnitNormalization({1, 2}), {{"axis", json::array({1, 2})}}},
  };
  for (const auto& [layer, expected] : cases) {
    const json c = layer->get_config();
    for (const auto& [key, value] : expected.items()) EXPECT_EQ(c.at(key), value) << layer->class_name() << " " << key;
    const auto cls = layers::find_layer_class(layer->class_name());
    ASSERT_TRUE(cls.has_value()) << layer->class_name();
    EXPECT_EQ(cls->from_config(c)->get_config(), c) << layer->class_name();
  }
  // Keras' defaults where its config leaves them out (SpatialDropout2D's data_format None).
  const auto spatial = layers::find_layer_class("SpatialDropout2D")->from_config({{"name", "s"}, {"rate", 0.5},
                                                                                  {"data_format", nullptr}});
  EXPECT_EQ(spatial->get_config().at("data_format"), "channels_last");
  EXPECT_NE(message_of([] {
              (void)layers::find_layer_class("GroupNormalization")->from_config({{"name", "g"}, {"axis", {1, 2}}});
            }).find("one axis"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep
