// Normalization (adapted), RandomFlip, RandomContrast and RandomBrightness in models trained with
// fit: the statistics stay as adapted on every replica, two replicas train as one (the coins and
// factors follow the example, not the replica), predict leaves the images as they are, and the
// models cross a .keras file.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/saved_model.hpp"

namespace lockstep {
namespace {

constexpr std::int64_t kExamples = 32, kSide = 4;

// Images of 3 channels far from zero mean and unit variance, and labels from their left half.
const test::Classification& data() {
  static const test::Classification d = [] {
    test::Classification c;
    c.x = add_scalar(scale(test::random_uniform(Shape{kExamples, kSide, kSide, 3}, 3, 0.0f, 1.0f), 40.0f),
                     100.0f);
    const auto v = c.x.to_vector<float>();
    std::vector<float> y;
    for (std::int64_t b = 0; b < kExamples; ++b)
      y.push_back(v[static_cast<std::size_t>(b * kSide * kSide * 3)] > 120.0f);
    c.y = Tensor::from_vector(y, {kExamples, 1});
    return c;
  }();
  return d;
}

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<float> mean, variance;
  bool same_on_every_replica = true;
  int copies = 0;  // of each statistic: one per replica
};

// Input -> Normalization (adapted on the data) -> RandomFlip -> Conv2D -> GlobalAveragePooling2D
// -> Dense(sigmoid), two epochs of fit on `replicas` CPU replicas.
Trained train(int replicas, const std::string& save_to = "") {
  distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
  auto scope = strategy.scope();
  set_random_seed(4);
  auto norm = layers::Normalization();
  dynamic_cast<layers::NormalizationLayer&>(*norm).adapt(data().x);
  const KerasTensor in = Input({kSide, kSide, 3});
  const KerasTensor flipped = call(layers::RandomFlip("horizontal_and_vertical"), call(norm, in));
  const KerasTensor pooled =
      call(layers::GlobalAveragePooling2D(), call(layers::Conv2D(4, {3, 3}, "relu"), flipped));
  Functional m(in, call(layers::Dense(1, "sigmoid"), pooled));
  m.compile(optimizers::SGD(0.1), losses::BinaryCrossentropy());
  m.fit(data().x, data().y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  Trained t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  const auto& n = dynamic_cast<const layers::NormalizationLayer&>(*norm);
  t.mean = n.mean().to_vector<float>();
  t.variance = n.variance().to_vector<float>();
  for (const auto& var : norm->variables()) {
    t.copies = var.num_copies();
    for (int r = 1; r < var.num_copies(); ++r)
      t.same_on_every_replica = t.same_on_every_replica && var.copy(r).on_host().to_vector<float>() ==
                                                               var.copy(0).on_host().to_vector<float>();
  }
  if (!save_to.empty()) {
    save_model(m, save_to);
    auto back = load_model(save_to);
    // predict: RandomFlip is the identity, so the loaded model predicts the same bits.
    EXPECT_EQ(back->predict(data().x).to_vector<float>(), m.predict(data().x).to_vector<float>());
    const auto& loaded = dynamic_cast<const layers::NormalizationLayer&>(*back->layers()[1]);
    EXPECT_EQ(loaded.mean().to_vector<float>(), t.mean);
    EXPECT_EQ(back->layers()[2]->class_name(), "RandomFlip");
  }
  return t;
}

TEST(PreprocessingFit, StatisticsStayAsAdaptedOnEveryReplicaAndTwoReplicasTrainAsOne) {
  const Trained one = train(1);
  const Trained two = train(2);
  // The adapted statistics: per channel of all the data, untouched by fit.
  const auto v = data().x.to_vector<float>();
  for (int c = 0; c < 3; ++c) {
    double mean = 0;
    for (std::size_t i = c; i < v.size(); i += 3) mean += v[i] / (kExamples * kSide * kSide);
    EXPECT_NEAR(one.mean[c], mean, 1e-3) << c;
  }
  EXPECT_EQ(two.mean, one.mean);
  EXPECT_EQ(two.variance, one.variance);
  EXPECT_EQ(two.copies, 2);
  EXPECT_TRUE(two.same_on_every_replica);
  ASSERT_EQ(two.weights.size(), one.weights.size());
  for (std::size_t w = 0; w < one.weights.size(); ++w)
    for (std::size_t i = 0; i < one.weights[w].size(); ++i)
      EXPECT_NEAR(two.weights[w][i], one.weights[w][i], 1e-5f) << w << " " << i;
}

// Saved as a .keras file and loaded: the same statistics and, RandomFlip the identity in predict,
// the same predictions.
TEST(PreprocessingFit, PredictDoesNotFlipAndTheModelCrossesAKerasFile) {
  const std::string dir = ::testing::TempDir() + "/preprocessing_fit";
  std::filesystem::create_directories(dir);
  (void)train(1, dir + "/model.keras");
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// Input -> RandomContrast (seeded) -> RandomBrightness -> Conv2D -> pooling -> Dense, two epochs of
// fit on `replicas` CPU replicas; saved and loaded when `save_to` is given.
std::vector<std::vector<float>> train_coloured(int replicas, const std::string& save_to = "") {
  distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
  auto scope = strategy.scope();
  set_random_seed(4);
  const KerasTensor in = Input({kSide, kSide, 3});
  const KerasTensor contrast = call(layers::RandomContrast({0.3f, 0.6f}, {-50.0f, 50.0f}, 11), in);
  const KerasTensor bright = call(layers::RandomBrightness({0.25f}, {-50.0f, 50.0f}), contrast);
  const KerasTensor pooled = call(layers::GlobalAveragePooling2D(), call(layers::Conv2D(4, {3, 3}, "relu"), bright));
  Functional m(in, call(layers::Dense(1, "sigmoid"), pooled));
  m.compile(optimizers::SGD(0.1), losses::BinaryCrossentropy());
  m.fit(data().x, data().y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  std::vector<std::vector<float>> weights;
  for (const auto& var : m.variables()) weights.push_back(var.read_value().to_vector<float>());
  if (!save_to.empty()) {
    save_model(m, save_to);
    auto back = load_model(save_to);
    // Both are the identity in predict; their configs (the contrast's own seed too) cross the file.
    EXPECT_EQ(back->predict(data().x).to_vector<float>(), m.predict(data().x).to_vector<float>());
    for (std::size_t i : {1u, 2u}) EXPECT_EQ(back->layers()[i]->get_config(), m.layers()[i]->get_config()) << i;
    EXPECT_EQ(back->layers()[1]->get_config().at("seed"), 11);
  }
  return weights;
}

// The colour layers draw per example, so two replicas train what one device trains.
TEST(PreprocessingFit, RandomContrastAndBrightnessTrainAsOneDeviceOnTwoReplicasAndCrossAKerasFile) {
  const std::string dir = ::testing::TempDir() + "/preprocessing_fit";
  std::filesystem::create_directories(dir);
  const auto one = train_coloured(1, dir + "/coloured.keras");
  const auto two = train_coloured(2);
  ASSERT_EQ(two.size(), one.size());
  for (std::size_t w = 0; w < one.size(); ++w)
    for (std::size_t i = 0; i < one[w].size(); ++i) EXPECT_NEAR(two[w][i], one[w][i], 1e-5f) << w << " " << i;
}

}  // namespace
}  // namespace lockstep
