// RandomTranslation, RandomRotation and RandomZoom (Keras 3's geometric augmentations): Keras'
// transform matrices from given draws, fixed factors giving exact pixels, the identity in
// inference, draws per image and per step that replicas repeat, factor parsing and refusals as
// Keras', and configs both ways.
#include "lockstep/layers/random_affine_layers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using layers::FillMode;
using layers::Interpolation;
using nlohmann::json;

const layers::RandomAffineLayer& affine(const layers::LayerPtr& l) {
  return dynamic_cast<const layers::RandomAffineLayer&>(*l);
}

// Draws u of each image as the layers take them: (n, 1) float32 columns.
std::vector<Tensor> draws(const std::vector<std::vector<float>>& columns) {
  std::vector<Tensor> d;
  for (const auto& c : columns)
    d.push_back(Tensor::from_vector(c, Shape{static_cast<std::int64_t>(c.size()), 1}));
  return d;
}

void expect_rows(const Tensor& t, const std::vector<std::vector<double>>& want, double tol) {
  ASSERT_EQ(t.shape(), (Shape{static_cast<std::int64_t>(want.size()), 8}));
  const std::vector<float> v = t.to_vector<float>();
  for (std::size_t r = 0; r < want.size(); ++r)
    for (std::size_t k = 0; k < 8; ++k)
      EXPECT_NEAR(v[r * 8 + k], want[r][k], tol * (1 + std::fabs(want[r][k])))
          << "row " << r << " entry " << k;
}

// random_translation.py: dy = uniform(height) * height, dx = uniform(width) * width, [1, 0, -dx, 0, 1, -dy,
// 0, 0].
TEST(RandomTranslation, BuildsKerasTranslationMatrices) {
  auto l = layers::RandomTranslation({0.2f}, {-0.1f, 0.3f});
  const Tensor t = affine(l).transforms(draws({{0.0f, 0.5f}, {0.0f, 0.75f}}), 10, 20);
  // height (-0.2, 0.2): dy = -2, 0; width (-0.1, 0.3): dx = -2, 4.
  expect_rows(t, {{1, 0, 2, 0, 1, 2, 0, 0}, {1, 0, -4, 0, 1, 0, 0, 0}}, 1e-5);
}

// random_rotation.py with _compute_affine_matrix: angle uniform(lower * 360, upper * 360) about
// ((w - 1) / 2, (h - 1) / 2); sin and cos within float32's rounding (of the angle too: Keras draws
// it in float32) for every angle of a turn.
TEST(RandomRotation, BuildsKerasRotationMatricesForAnglesOfAWholeTurn) {
  auto l = layers::RandomRotation({1.0f});  // (-1, 1): angles in [-360, 360)
  std::vector<float> u;
  for (int i = 0; i < 200; ++i) u.push_back(static_cast<float>(i) / 200.0f);
  const Tensor t = affine(l).transforms(draws({u}), 5, 9);
  std::vector<std::vector<double>> want;
  for (const float ui : u) {
    const double a = (-360.0 + static_cast<double>(ui) * 720.0) * M_PI / 180.0, c = std::cos(a),
                 s = std::sin(a);
    const double cx = 4.0, cy = 2.0;
    want.push_back({c, -s, cx - cx * c + cy * s, s, c, cy - cx * s - cy * c, 0, 0});
  }
  expect_rows(t, want, 2e-6);
}

// random_zoom.py: zy = uniform(1 + lower, 1 + upper), zx likewise or zy without a width_factor;
// [zx, 0, (w - 1) / 2 (1 - zx), 0, zy, (h - 1) / 2 (1 - zy), 0, 0].
TEST(RandomZoom, BuildsKerasZoomMatricesAndTheHeightsZoomServesTheWidthWithoutAFactor) {
  auto both = layers::RandomZoom({-0.5f, 0.5f}, std::vector<float>{0.2f});
  EXPECT_EQ(affine(both).draw_count(), 2);
  expect_rows(affine(both).transforms(draws({{0.25f}, {0.5f}}), 5, 9), {{1.0, 0, 0, 0, 0.75, 0.5, 0, 0}},
              1e-6);
  auto height_only = layers::RandomZoom({0.5f});
  EXPECT_EQ(affine(height_only).draw_count(), 1);
  expect_rows(affine(height_only).transforms(draws({{0.75f}}), 5, 9), {{1.25, 0, -1.0, 0, 1.25, -0.5, 0, 0}},
              1e-6);
}

// A factor pair of equal bounds fixes the transform: the layer's output is affine_transform's with
// Keras' matrix. 4x4 image of 10 * row + column.
TEST(RandomAffineLayers, FixedFactorsGiveTheirTransformsExactPixels) {
  std::vector<float> v;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) v.push_back(static_cast<float>(10 * y + x));
  const Tensor image = Tensor::from_vector(v, Shape{1, 4, 4, 1});
  const CallContext train{.training = true, .seed = 3, .step = 1};
  // Down by a quarter (one row), left by half (two columns): output (x, y) reads (x + 2, y - 1).
  auto shift =
      layers::RandomTranslation({0.25f, 0.25f}, {-0.5f, -0.5f}, {.fill_mode = "constant", .fill_value = -1});
  shift->build(Shape{-1, 4, 4, 1}, 1);
  EXPECT_EQ(shift->call(image, train).to_vector<float>(),
            (std::vector<float>{-1, -1, -1, -1, 2, 3, -1, -1, 12, 13, -1, -1, 22, 23, -1, -1}));
  // A quarter turn (90 degrees): output (x, y) reads (3 - y, x) on a 4x4 image (cx = cy = 1.5).
  auto turn = layers::RandomRotation({0.25f, 0.25f}, {.interpolation = "nearest"});
  turn->build(Shape{-1, 4, 4, 1}, 1);
  const std::vector<float> turned = turn->call(image, train).to_vector<float>();
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      EXPECT_EQ(turned[static_cast<std::size_t>(y * 4 + x)], v[static_cast<std::size_t>(x * 4 + 3 - y)]);
  // Zoomed out by 2 about the centre in both axes (factor 1: zoom 2), nearest fill: output x reads
  // 2 x - 1.5 clamped, then rounded half away from zero: columns 0, 1, 3, 3 (rows alike).
  auto zoom =
      layers::RandomZoom({1.0f, 1.0f}, std::nullopt, {.fill_mode = "nearest", .interpolation = "nearest"});
  zoom->build(Shape{-1, 4, 4, 1}, 1);
  EXPECT_EQ(zoom->call(image, train).to_vector<float>(),
            (std::vector<float>{0, 1, 3, 3, 10, 11, 13, 13, 30, 31, 33, 33, 30, 31, 33, 33}));
}

Tensor photos(std::int64_t n) { return test::random_uniform(Shape{n, 6, 5, 3}, 21, 0.0f, 255.0f); }

// Inference is the identity (cast to the compute dtype); training draws another transform per
// image and per step, the same for the same seed and step, and a second replica's half of the batch
// draws what one device draws for it.
TEST(RandomAffineLayers, DrawPerImageAndStepAsOneDeviceAndAreTheIdentityInInference) {
  const std::int64_t n = 8;
  const Tensor x = photos(n);
  const std::vector<layers::LayerPtr> all{layers::RandomTranslation({0.3f}, {0.3f}),
                                          layers::RandomRotation({0.2f}), layers::RandomZoom({0.3f}),
                                          layers::RandomZoom({0.3f}, std::vector<float>{0.2f})};
  for (const auto& l : all) {
    SCOPED_TRACE(l->class_name());
    l->build(Shape{-1, 6, 5, 3}, 7);
    EXPECT_TRUE(l->call(x, CallContext{.training = false}).bitwise_equal(x));
    EXPECT_EQ(l->keras_training_default(), std::optional<bool>(true));
    const CallContext train{.training = true, .seed = 5, .step = 2};
    const Tensor y = l->call(x, train);
    EXPECT_TRUE(l->call(x, train).bitwise_equal(y));
    CallContext next = train;
    next.step = 3;
    EXPECT_FALSE(l->call(x, next).bitwise_equal(y));
    // Each image its own transform: the same image repeated comes out n different ways.
    const Tensor same =
        reshape(gather_rows(reshape(x, Shape{n, 90}), Tensor::zeros(Shape{n}, DType::kI64)), x.shape());
    const std::vector<float> outs = l->call(same, train).to_vector<float>();
    std::set<std::vector<float>> distinct;
    for (std::int64_t b = 0; b < n; ++b)
      distinct.insert(std::vector<float>(outs.begin() + b * 90, outs.begin() + (b + 1) * 90));
    EXPECT_EQ(distinct.size(), static_cast<std::size_t>(n));
    CallContext second = train;
    second.first_example = n / 2;
    const std::vector<float> all_out = y.to_vector<float>();
    EXPECT_EQ(l->call(x.slice(n / 2, n), second).to_vector<float>(),
              std::vector<float>(all_out.begin() + static_cast<long>(all_out.size() / 2), all_out.end()));
  }
  // A layer seed is its own stream, whatever the model builds the layer with.
  auto s1 = layers::RandomRotation({0.2f}, {.seed = 42}), s2 = layers::RandomRotation({0.2f}, {.seed = 42});
  s1->build(Shape{-1, 6, 5, 3}, 1);
  s2->build(Shape{-1, 6, 5, 3}, 2);
  const CallContext ctx{.training = true, .seed = 5, .step = 0};
  EXPECT_TRUE(s1->call(x, ctx).bitwise_equal(s2->call(x, ctx)));
}

// Keras' _set_factor of each class: RandomTranslation's numbers in [-1, 1], RandomZoom's in
// (-1, 1], RandomRotation's base rule (a number in [-1, 1], a pair refused only wholly outside).
TEST(RandomAffineLayers, FactorsAreReadAndRefusedAsKeras) {
  EXPECT_VALUE_ERROR(
      layers::RandomTranslation({1.5f}, {0.1f}),
      "RandomTranslation: the `height_factor` argument should be a number (or a list of two numbers) "
      "in the range [-1.0, 1.0]. Received: input_number=1.5");
  EXPECT_VALUE_ERROR(layers::RandomTranslation({0.1f}, {0.1f, 0.2f, 0.3f}),
                     "Received: width_factor=(0.1, 0.2, 0.3)");
  EXPECT_NO_THROW(layers::RandomTranslation({-1.0f, 1.0f}, {1.0f}));
  EXPECT_VALUE_ERROR(layers::RandomZoom({-1.0f}), "in the range (-1.0, 1.0]. Received: input_number=-1");
  EXPECT_VALUE_ERROR(layers::RandomZoom({0.1f}, std::vector<float>{0.2f, 1.1f}), "input_number=1.1");
  EXPECT_NO_THROW(layers::RandomZoom({1.0f}));
  EXPECT_VALUE_ERROR(layers::RandomRotation({1.5f}),
                     "RandomRotation: the `factor` argument should be a number");
  EXPECT_VALUE_ERROR(layers::RandomRotation({1.5f, 2.0f}), "Received: factor=(1.5, 2)");
  // A pair sorted; one reaching past the bounds but not wholly outside them kept as it is.
  EXPECT_EQ(layers::RandomRotation({0.4f, -0.2f})->get_config().at("factor"), json::array({-0.2f, 0.4f}));
  EXPECT_EQ(layers::RandomRotation({-2.0f, 0.5f})->get_config().at("factor"), json::array({-2.0, 0.5}));
  EXPECT_EQ(layers::RandomRotation({-0.3f})->get_config().at("factor"), json::array({-0.3f, 0.3f}));
  EXPECT_VALUE_ERROR(layers::RandomRotation({0.1f}, {.fill_mode = "mirror"}),
                     "RandomRotation: Unknown `fill_mode` mirror");
  EXPECT_VALUE_ERROR(layers::RandomZoom({0.1f}, std::nullopt, {.interpolation = "bicubic"}),
                     "RandomZoom: Unknown `interpolation` bicubic. Expected of one ('nearest', 'bilinear')");
  auto l = layers::RandomZoom({0.1f});
  EXPECT_VALUE_ERROR(l->build(Shape{-1, 4, 3}, 0), "needs batched images");
}

// Keras' configs: factors as given (RandomRotation's as (lower, upper)), the shared options, a
// layer's own seed; data_format is fixed to channels_last by the registry.
TEST(RandomAffineLayers, ConfigsAreKerasBothWays) {
  const json t =
      layers::RandomTranslation({0.2f}, {-0.1f, 0.3f}, {.fill_mode = "wrap", .seed = 4})->get_config();
  EXPECT_EQ(t.at("height_factor"), json(0.2f));
  EXPECT_EQ(t.at("width_factor"), json::array({-0.1f, 0.3f}));
  EXPECT_EQ(t.at("fill_mode"), "wrap");
  EXPECT_EQ(t.at("interpolation"), "bilinear");
  EXPECT_EQ(t.at("fill_value"), 0.0);
  EXPECT_EQ(t.at("seed"), 4);
  const json z = layers::RandomZoom({0.2f})->get_config();
  EXPECT_TRUE(z.at("width_factor").is_null());
  EXPECT_TRUE(z.at("seed").is_null());
  EXPECT_EQ(z.at("fill_mode"), "reflect");
  const json r =
      layers::RandomRotation({0.1f}, {.interpolation = "nearest", .fill_value = 2.5f})->get_config();
  for (const json& c : {t, z, r}) {
    const std::string cls = c == t ? "RandomTranslation" : c == z ? "RandomZoom" : "RandomRotation";
    const auto row = layers::find_layer_class(cls);
    ASSERT_TRUE(row.has_value()) << cls;
    EXPECT_EQ(row->from_config(c)->get_config(), c) << cls;
    EXPECT_EQ(row->keras_fixed.at("data_format"), "channels_last") << cls;
  }
}

}  // namespace
}  // namespace lockstep
