// RandomTranslation, RandomRotation, RandomZoom (and RandomCrop) in a model trained with fit: it learns through
// them, two replicas train what one device trains (the transforms follow the example, not the
// replica), predict leaves the images as they are, and the model crosses a .keras file.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/image_preprocessing_layers.hpp"
#include "lockstep/layers/random_affine_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/saved_model.hpp"

namespace lockstep {
namespace {

constexpr std::int64_t kExamples = 64, kSide = 8;

// Noise images, a bright square in the top-left quarter of half of them (the label): small shifts,
// turns and zooms keep it there.
const test::Classification& data() {
  static const test::Classification d = [] {
    std::vector<float> v =
        test::random_uniform(Shape{kExamples, kSide, kSide, 1}, 3, 0.0f, 0.3f).to_vector<float>();
    std::vector<float> y;
    for (std::int64_t b = 0; b < kExamples; ++b) {
      y.push_back(static_cast<float>(b % 2));
      if (b % 2)
        for (std::int64_t i = 1; i < 4; ++i)
          for (std::int64_t j = 1; j < 4; ++j)
            v[static_cast<std::size_t>((b * kSide + i) * kSide + j)] += 1.0f;
    }
    return test::Classification{Tensor::from_vector(v, {kExamples, kSide, kSide, 1}),
                                Tensor::from_vector(y, {kExamples, 1})};
  }();
  return d;
}

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
};

// The convnet behind `augmented` (Conv2D -> pooling -> Dense), `epochs` of fit, its weights and
// losses; saved and loaded when `save_to` is given: predict (the augmentations' identity) and
// the configs of layers 1..`augmentations` cross the file, layer 1's own seed `seed` too.
Trained fit_convnet(const KerasTensor& in, const KerasTensor& augmented, int epochs, const std::string& save_to,
                    std::size_t augmentations, int seed) {
  const KerasTensor pooled =
      call(layers::GlobalMaxPooling2D(), call(layers::Conv2D(4, {3, 3}, "relu"), augmented));
  Functional m(in, call(layers::Dense(1, "sigmoid"), pooled));
  m.compile(optimizers::Adam(0.05), losses::BinaryCrossentropy());
  const History h =
      m.fit(data().x, data().y, {.epochs = epochs, .batch_size = 16, .shuffle = false, .verbose = 0});
  Trained t{{}, h.history.at("loss")};
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  if (!save_to.empty()) {
    save_model(m, save_to);
    auto back = load_model(save_to);
    EXPECT_EQ(back->predict(data().x).to_vector<float>(), m.predict(data().x).to_vector<float>());
    for (std::size_t i = 1; i <= augmentations; ++i)
      EXPECT_EQ(back->layers()[i]->get_config(), m.layers()[i]->get_config()) << i;
    EXPECT_EQ(back->layers()[1]->get_config().at("seed"), seed);
  }
  return t;
}

// train(replicas, save_to): one device learns (its loss halves in 6 epochs) and crosses a
// .keras file; two replicas train its weights.
template <typename Train>
void expect_learns_and_two_replicas_train_as_one(const std::string& name, const Train& train) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  const Trained one = train(1, dir + "/model.keras");
  EXPECT_LT(one.losses.back(), 0.5 * one.losses.front());
  const Trained two = train(2, "");
  ASSERT_EQ(two.weights.size(), one.weights.size());
  for (std::size_t w = 0; w < one.weights.size(); ++w)
    for (std::size_t i = 0; i < one.weights[w].size(); ++i)
      EXPECT_NEAR(two.weights[w][i], one.weights[w][i], 1e-4f) << w << " " << i;
}

// Input -> RandomTranslation (seeded) -> RandomRotation -> RandomZoom -> the convnet, on
// `replicas` CPU replicas; the three are the identity in predict, and their configs (the
// translation's own seed too) cross the file.
Trained train_augmented(int replicas, const std::string& save_to) {
  distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
  auto scope = strategy.scope();
  set_random_seed(4);
  const KerasTensor in = Input({kSide, kSide, 1});
  const KerasTensor shifted = call(layers::RandomTranslation({0.1f}, {-0.1f, 0.1f}, {.seed = 5}), in);
  const KerasTensor turned = call(layers::RandomRotation({0.03f}, {.fill_mode = "constant"}), shifted);
  const KerasTensor zoomed =
      call(layers::RandomZoom({0.1f}, std::nullopt, {.interpolation = "nearest"}), turned);
  return fit_convnet(in, zoomed, 6, save_to, 3, 5);
}

TEST(RandomAffineFit, AModelLearnsThroughTheAugmentationsAndTwoReplicasTrainAsOne) {
  expect_learns_and_two_replicas_train_as_one("random_affine_fit", train_augmented);
}

// RandomCrop (7 x 7 of the 8 x 8 images, its own seed) before the same convnet: one window per
// batch and step, so two replicas (each half of the batch) train what one device trains; predict
// takes the centre crop of the target's aspect ratio, resized (here the whole 8 x 8, to 7 x 7), and the
// model crosses a .keras file with its seed.
Trained train_cropped(int replicas, const std::string& save_to) {
  distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
  auto scope = strategy.scope();
  set_random_seed(4);
  const KerasTensor in = Input({kSide, kSide, 1});
  return fit_convnet(in, call(layers::RandomCrop(kSide - 1, kSide - 1, 9), in), 6, save_to, 1, 9);
}

TEST(RandomCropFit, AModelLearnsThroughTheCropAndTwoReplicasTrainAsOne) {
  expect_learns_and_two_replicas_train_as_one("random_crop_fit", train_cropped);
}

}  // namespace
}  // namespace lockstep
