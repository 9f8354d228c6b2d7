// RandomCrop (Keras 3's, as it documents itself): in training one contiguous window per batch at an
// offset drawn per step, the same for every example and for a replica's part of the batch, the
// offsets covering the range; in inference (and for images smaller than the target) Keras' centre
// crop to the target's aspect ratio, resized, against Keras' numbers; its own seed; configs.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "common/error_message.hpp"
#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/layer_registry.hpp"

namespace lockstep {
namespace {

using layers::CallContext;
using nlohmann::json;

layers::LayerPtr built(layers::LayerPtr l, const Shape& image, std::uint64_t seed) {
  l->build(Shape{-1, image[0], image[1], image[2]}, seed);
  return l;
}

// The offset (h0, w0) at which y is x's window, the same for every example: y[b, i, j, c] ==
// x[b, h0 + i, w0 + j, c] for all; none if no offset gives y.
std::optional<std::pair<std::int64_t, std::int64_t>> window_of(const Tensor& x, const Tensor& y) {
  const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  const std::int64_t n = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3), h = y.dim(1), w = y.dim(2);
  for (std::int64_t h0 = 0; h0 + h <= H; ++h0)
    for (std::int64_t w0 = 0; w0 + w <= W; ++w0) {
      bool all = true;
      for (std::int64_t b = 0; b < n && all; ++b)
        for (std::int64_t i = 0; i < h && all; ++i)
          for (std::int64_t j = 0; j < w && all; ++j)
            for (std::int64_t c = 0; c < C && all; ++c)
              all = yv[static_cast<std::size_t>(((b * h + i) * w + j) * C + c)] ==
                    xv[static_cast<std::size_t>(((b * H + h0 + i) * W + w0 + j) * C + c)];
      if (all) return std::pair{h0, w0};
    }
  return std::nullopt;
}

TEST(RandomCrop, TrainingTakesOneWindowPerBatchAtOffsetsThatCoverTheRange) {
  const Tensor x = test::random_uniform(Shape{4, 6, 7, 3}, 21, 0.0f, 255.0f);
  const auto crop = built(layers::RandomCrop(3, 4), Shape{6, 7, 3}, 7);
  std::set<std::int64_t> rows, cols;
  std::set<std::pair<std::int64_t, std::int64_t>> offsets;
  for (std::uint64_t step = 0; step < 60; ++step) {
    const CallContext ctx{.training = true, .seed = 5, .step = step};
    const Tensor y = crop->call(x, ctx);
    ASSERT_EQ(y.shape(), (Shape{4, 3, 4, 3}));
    const auto at = window_of(x, y);
    ASSERT_TRUE(at.has_value()) << "step " << step << ": not one window of the input for the whole batch";
    rows.insert(at->first);
    cols.insert(at->second);
    offsets.insert(*at);
    // The same step draws the same; a replica's part of the batch (its first example moved on) takes
    // the window the whole batch takes.
    EXPECT_TRUE(crop->call(x, ctx).bitwise_equal(y));
    CallContext second = ctx;
    second.first_example = 2;
    EXPECT_TRUE(crop->call(x.slice(2, 4), second).bitwise_equal(y.slice(2, 4))) << "step " << step;
  }
  // h0 in [0, 3], w0 in [0, 3] (Keras' uniform(0, in - out + 1) truncated), every value reached.
  EXPECT_EQ(rows, (std::set<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(cols, (std::set<std::int64_t>{0, 1, 2, 3}));
  EXPECT_GT(offsets.size(), 8u);
  // Images of the target's size are the window itself.
  const auto same = built(layers::RandomCrop(6, 7), Shape{6, 7, 3}, 7);
  EXPECT_TRUE(same->call(x, CallContext{.training = true, .seed = 5}).bitwise_equal(x));
}

// The input's gradient is the output's at the window, 0 elsewhere (the window's gather, scattered
// back), for a replica's part of the batch too.
TEST(RandomCrop, TheInputsGradientIsTheOutputsAtTheWindow) {
  const Tensor x = test::random_uniform(Shape{4, 6, 7, 2}, 23, -1.0f, 1.0f);
  const Tensor dy = test::random_uniform(Shape{2, 3, 4, 2}, 24, -1.0f, 1.0f);
  const auto crop = built(layers::RandomCrop(3, 4), Shape{6, 7, 2}, 7);
  for (std::uint64_t step = 0; step < 4; ++step) {
    const CallContext ctx{.training = true, .seed = 5, .step = step, .first_example = 2};
    const Tensor part = x.slice(2, 4).clone();
    GradientTape tape;
    tape.watch(part);
    const Tensor y = crop->call(part, ctx);
    const auto at = window_of(part, y);
    ASSERT_TRUE(at.has_value()) << step;
    const std::vector<float> g = tape.gradient(y, std::vector<Tensor>{part}, dy)[0].to_vector<float>();
    const std::vector<float> d = dy.to_vector<float>();
    std::vector<float> want(g.size(), 0.0f);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t j = 0; j < 4; ++j)
          for (std::int64_t c = 0; c < 2; ++c)
            want[static_cast<std::size_t>(((b * 6 + at->first + i) * 7 + at->second + j) * 2 + c)] =
                d[static_cast<std::size_t>(((b * 3 + i) * 4 + j) * 2 + c)];
    EXPECT_EQ(g, want) << "step " << step;
  }
}

// Keras' input for the numbers below: x[k] = 0.5 k + sin(k), shape (1, 5, 7, 2).
Tensor keras_input() {
  std::vector<float> v;
  for (int k = 0; k < 70; ++k) v.push_back(static_cast<float>(0.5 * k + std::sin(static_cast<double>(k))));
  return Tensor::from_vector(v, Shape{1, 5, 7, 2});
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
}

// Keras documents inference (and training on images smaller than the target) as the largest
// window of the target's aspect ratio, centred, resized: keras.preprocessing.image.smart_resize,
// equal to keras.layers.Resizing(h, w, crop_to_aspect_ratio=True). The numbers are Keras 3.15.1's
// (TensorFlow 2.21) for keras_input(); Keras' own RandomCrop returns its input unchanged there
// (keras-team/keras#21868).
TEST(RandomCrop, InferenceIsKerasDocumentedCentreCropResized) {
  const Tensor x = keras_input();
  const CallContext infer{.training = false};
  const auto c32 = built(layers::RandomCrop(3, 2), Shape{5, 7, 2}, 1);
  expect_near(c32->call(x, infer).to_vector<float>(),
              {4.0466948f, 4.8205595f, 6.605309f, 6.757056f, 16.795841f, 17.392889f, 17.138435f, 17.660301f,
               27.802488f, 27.912914f, 29.623865f, 30.44605f});
  const auto c46 = built(layers::RandomCrop(4, 6), Shape{5, 7, 2}, 1);
  const Tensor y46 = c46->call(x, infer);
  ASSERT_EQ(y46.shape(), (Shape{1, 4, 6, 2}));
  expect_near(y46.to_vector<float>(),
              {0.15910809f, 1.3664417f, 1.7427725f, 1.6161089f, 1.8587751f, 2.6310382f, 4.044035f,  4.59748f,
               4.589324f,   4.603037f,  5.3794727f, 6.718487f,  7.967398f,  8.099314f,  7.846326f,  8.0664215f,
               9.358984f,   10.352701f, 10.958564f, 10.938312f, 11.0686035f, 11.939181f, 13.540213f, 14.282315f,
               14.249328f,  13.941332f, 14.646833f, 15.69695f,  16.958782f, 17.321539f, 17.225246f, 17.529528f,
               18.72433f,   19.811962f, 20.624384f, 20.35158f,  20.244663f, 20.89178f,  22.488724f, 23.419071f,
               23.622604f,  23.591354f, 24.110174f, 25.076902f, 26.424377f, 26.7145f,   26.486664f, 26.533218f});
  // Images smaller than the target take that path in training too (here 5 x 7 to 6 x 9).
  const auto c69 = built(layers::RandomCrop(6, 9), Shape{5, 7, 2}, 1);
  const Tensor trained = c69->call(x, CallContext{.training = true, .seed = 3, .step = 1});
  ASSERT_EQ(trained.shape(), (Shape{1, 6, 9, 2}));
  EXPECT_TRUE(trained.bitwise_equal(c69->call(x, infer)));
  const std::vector<float> v = trained.to_vector<float>();
  expect_near({v[0], v[1], v[2], v[17], v[18], v[107]}, {0.0f, 1.341471f, 1.2728652f, 6.920167f, 3.9953036f, 26.500244f});
}

TEST(RandomCrop, ALayerSeedIsItsOwnStreamWhateverTheModelsSeed) {
  const Tensor x = test::random_uniform(Shape{2, 9, 9, 1}, 4, 0.0f, 1.0f);
  const auto draws = [&](const layers::LayerPtr& l, std::uint64_t model_seed) {
    std::vector<float> all;
    for (std::uint64_t step = 0; step < 8; ++step) {
      const auto y = l->call(x, CallContext{.training = true, .seed = model_seed, .step = step}).to_vector<float>();
      all.insert(all.end(), y.begin(), y.end());
    }
    return all;
  };
  const Shape image{9, 9, 1};
  const auto seeded = draws(built(layers::RandomCrop(3, 3, 42), image, 1), 5);
  EXPECT_EQ(draws(built(layers::RandomCrop(3, 3, 42), image, 2), 6), seeded);
  EXPECT_NE(draws(built(layers::RandomCrop(3, 3, 43), image, 1), 5), seeded);
  // Without one, the model's seeds: another build seed draws other windows.
  EXPECT_NE(draws(built(layers::RandomCrop(3, 3), image, 1), 5), draws(built(layers::RandomCrop(3, 3), image, 2), 5));
}

TEST(RandomCrop, ConfigsAreKerasBothWaysAndBadArgumentsAreRefused) {
  const json c = layers::RandomCrop(2, 3, 42)->get_config();
  EXPECT_EQ(c.at("height"), 2);
  EXPECT_EQ(c.at("width"), 3);
  EXPECT_EQ(c.at("seed"), 42);
  EXPECT_TRUE(layers::RandomCrop(2, 3)->get_config().at("seed").is_null());
  const auto cls = layers::find_layer_class("RandomCrop");
  ASSERT_TRUE(cls.has_value());
  EXPECT_EQ(cls->from_config(c)->get_config(), c);
  EXPECT_EQ(cls->keras_fixed.at("data_format"), "channels_last");
  EXPECT_EQ(layers::RandomCrop(2, 3)->compute_output_shape(Shape{-1, 8, 9, 4}), (Shape{-1, 2, 3, 4}));
  EXPECT_EQ(layers::RandomCrop(2, 3)->keras_training_default(), std::optional<bool>(true));
  EXPECT_VALUE_ERROR(layers::RandomCrop(0, 3), "height and width must be positive");
  EXPECT_VALUE_ERROR((void)layers::RandomCrop(2, 3)->compute_output_shape(Shape{-1, 8, 9}), "needs batched images");
  json bad = c;
  bad["seed"] = 0.5;
  EXPECT_VALUE_ERROR((void)cls->from_config(bad), "Argument `seed` must be an integer");
}

}  // namespace
}  // namespace lockstep
