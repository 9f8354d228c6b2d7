// Keras 3's other regularization layers and GroupNormalization / UnitNormalization in models:
// saved and loaded in both formats with the same predictions and weights; the noise acts in fit
// (training mode) with its deviation and never in evaluate; fit repeats bit for bit from a seed
// and N replicas train what one device does (the draws keyed by the example, as Dropout's); a
// call given training=False on one of them is one a Keras file cannot keep, as Dropout's.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "common/relative_error.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/group_normalization.hpp"
#include "lockstep/layers/regularization_layers.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
std::string tmp_dir() {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "regularization_layers").string();
  std::filesystem::create_directories(dir);
  return dir;
}
std::vector<std::vector<float>> values_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (const auto& v : vars) out.push_back(v.read_value().to_vector<float>());
  return out;
}

// Sequences (8 steps of 4 features) through every new layer to 3 classes.
std::unique_ptr<Sequential> sequence_model() {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{
          layers::Input({8, 4}), layers::SpatialDropout1D(0.2f), layers::Dense(6, "relu"),
          layers::GroupNormalization({.groups = 3}), layers::GaussianNoise(0.1f), layers::GaussianDropout(0.2f),
          layers::AlphaDropout(0.1f, {-1, 1, 6}), layers::UnitNormalization(), layers::Identity(), layers::Flatten(),
          layers::Dense(3, "softmax")},
      "regularized_sequence");
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// Images (5 x 5, 4 channels) through SpatialDropout2D, a Conv2D, instance normalisation
// (groups=-1) and GroupNormalization over a channels-first view.
std::unique_ptr<Sequential> image_model() {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Input({5, 5, 4}), layers::SpatialDropout2D(0.25f),
                                    layers::Conv2D(6, {3, 3}, "relu"), layers::GroupNormalization({.groups = -1}),
                                    layers::Permute({3, 1, 2}), layers::SpatialDropout2D(0.25f, "channels_first"),
                                    layers::GroupNormalization({.groups = 2, .axis = 1, .center = false}),
                                    layers::Flatten(), layers::Dense(3, "softmax")},
      "regularized_images");
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

Tensor labels(std::int64_t n) {
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 3);
  return Tensor::from_vector(y, {n});
}

const FitOptions kFit{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};

TEST(RegularizationLayersModel, SavesAndLoadsInBothFormatsAfterFit) {
  set_random_seed(4);
  for (auto* make : {&sequence_model, &image_model}) {
    auto model = make();
    const bool sequence = model->name() == "regularized_sequence";
    const Tensor x = test::random_uniform(sequence ? Shape{24, 8, 4} : Shape{24, 5, 5, 4}, 3, -2.0f, 2.0f);
    model->fit(x, labels(24), kFit);
    const Tensor want = model->predict(x);
    for (const std::string file : {"model.keras", "model_folder"}) {
      const std::string path = tmp_dir() + "/" + model->name() + "_" + file;
      std::filesystem::remove_all(path);
      save_model(*model, path);
      const auto loaded = load_model(path);
      EXPECT_TRUE(same_bits(loaded->predict(x), want)) << model->name() << " " << file;
      ASSERT_EQ(loaded->layers().size(), model->layers().size()) << file;
      for (std::size_t i = 0; i < model->layers().size(); ++i)
        EXPECT_EQ(loaded->layers()[i]->get_config(), model->layers()[i]->get_config()) << file << " layer " << i;
      const auto got = values_of(loaded->variables()), had = values_of(model->variables());
      EXPECT_EQ(got, had) << model->name() << " " << file;
    }
    // The .keras config as Keras' constructors take it: SpatialDropout's has no trainable (its
    // __init__ refuses one), the random layers' seed is null.
    const std::string keras = tmp_dir() + "/" + model->name() + "_model.keras";
    const nlohmann::json config =
        nlohmann::json::parse(io::find_entry(io::decode_zip(io::read_file(keras), "m"), "config.json")->bytes);
    for (const auto& layer : config.at("config").at("layers")) {
      const std::string cls = layer.at("class_name");
      const auto& c = layer.at("config");
      if (cls.starts_with("SpatialDropout")) {
        EXPECT_FALSE(c.contains("trainable")) << c.dump();
      } else if (cls != "InputLayer") {
        EXPECT_TRUE(c.contains("trainable")) << c.dump();
      }
      if (cls.find("Dropout") != std::string::npos || cls == "GaussianNoise") {
        EXPECT_TRUE(c.at("seed").is_null()) << c.dump();
      }
    }
  }
}

// x @ w by a Dense whose weights are w (learning rate 0): evaluate's loss is 0, while fit's is the
// noise's: GaussianNoise(0.5) before the Dense adds 0.5 z . w, of mean square 0.25 |w|^2 = 1.5625.
TEST(RegularizationLayersModel, NoiseActsInFitOnlyWithItsDeviation) {
  Sequential model({layers::Input({4}), layers::GaussianNoise(0.5f), layers::Dense(1)}, "noisy_regression");
  model.compile(optimizers::SGD(0.0), losses::MeanSquaredError());
  const Tensor x = test::random_uniform(Shape{2048, 4}, 5, -1.0f, 1.0f);
  (void)model.predict(x.slice(0, 1));  // built
  auto* dense = dynamic_cast<layers::DenseLayer*>(model.layers().back().get());
  ASSERT_NE(dense, nullptr);
  const Tensor w = Tensor::from_vector<float>({1, 2, -1, 0.5f}, {4, 1});
  dense->kernel().assign(w);
  dense->bias().assign(Tensor::zeros({1}));
  const Tensor y = matmul(x, w);
  EXPECT_NEAR(model.evaluate(x, y, {.batch_size = 64}).at("loss"), 0.0, 1e-10);
  const History h = model.fit(x, y, {.epochs = 1, .batch_size = 64, .shuffle = false, .verbose = 0});
  EXPECT_NEAR(h.history.at("loss")[0], 1.5625, 0.2);
}

// The draws follow the model's seed: two runs from one seed train the same bits; 3 replicas
// train what one device does (each example keyed by its index in the global batch).
TEST(RegularizationLayersModel, FitRepeatsFromASeedAndReplicasTrainWhatOneDeviceDoes) {
  const Tensor x = test::random_uniform(Shape{30, 8, 4}, 6, -2.0f, 2.0f);
  const auto train = [&](int replicas) {
    std::unique_ptr<distribute::MirroredStrategy> strategy;
    std::unique_ptr<Sequential> model;
    if (replicas > 0) {
      strategy = std::make_unique<distribute::MirroredStrategy>(distribute::MirroredOptions{.num_cpu_devices = replicas});
      auto scope = strategy->scope();
      set_random_seed(8);
      model = sequence_model();
    } else {
      set_random_seed(8);
      model = sequence_model();
    }
    model->fit(x, labels(30), {.epochs = 2, .batch_size = 10, .shuffle = false, .verbose = 0});
    return values_of(model->variables());
  };
  const auto one = train(0);
  EXPECT_EQ(train(0), one);
  EXPECT_LE(test::max_rel_diff(train(3), one), 1e-5);
}

// Keras writes "training": false on each call of these layers (their call's default), as on
// Dropout's: a call really given training=False is one a Keras file cannot keep (saving says so),
// and the loaded call follows the model's mode. GroupNormalization's training=False is kept.
TEST(RegularizationLayersModel, AKerasFileLeavesTheirCallsToTheModelsMode) {
  const KerasTensor in = Input({6, 4});
  KerasTensor h = in;
  for (const auto& layer : {layers::SpatialDropout1D(0.5f), layers::GaussianNoise(0.5f), layers::GaussianDropout(0.5f),
                            layers::AlphaDropout(0.5f)})
    h = call(layer, h, {.training = false});
  h = call(layers::GroupNormalization({.groups = 2}), h, {.training = false});
  Functional model(in, h, "modes");
  const std::string path = tmp_dir() + "/modes.keras";
  ::testing::internal::CaptureStderr();
  save_model(model, path);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  for (const char* name : {"spatial_dropout", "gaussian_noise", "gaussian_dropout", "alpha_dropout"})
    EXPECT_NE(warned.find("layer '" + std::string(name)), std::string::npos) << name << ": " << warned;
  EXPECT_EQ(warned.find("layer 'group_normalization"), std::string::npos) << warned;
  const auto loaded = load_model(path);
  const auto* functional = dynamic_cast<const Functional*>(loaded.get());
  ASSERT_NE(functional, nullptr);
  std::vector<std::optional<bool>> modes;
  for (const auto& n : functional->nodes()) modes.push_back(n.training);
  const std::vector<std::optional<bool>> want{std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                                              false};
  EXPECT_EQ(modes, want);
}

}  // namespace
}  // namespace lockstep
