// Keras 3's advanced activation layers, its other activations and SeparableConv2D in models: saved
// and loaded in both formats (lockstep's folders and .keras) with the same predictions and
// weights, and a PReLU's alpha trained by fit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
std::string tmp_dir() {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "activation_layers").string();
  std::filesystem::create_directories(dir);
  return dir;
}

Sequential activation_convnet() {
  return Sequential({layers::Input({6, 6, 2}),
                     layers::SeparableConv2D({.filters = 4, .kernel_size = {3, 3}, .padding = "same",
                                              .depth_multiplier = 2, .activation = "selu"}),
                     layers::PReLU("uniform", {1, 2}), layers::ReLU(1.5f, 0.1f, 0.05f),
                     layers::SeparableConv2D({.filters = 3, .kernel_size = {2, 2}, .strides = {2, 2},
                                              .activation = "hard_swish", .use_bias = false}),
                     layers::Flatten(), layers::Dense(8, "softplus"), layers::LeakyReLU(0.25f), layers::ELU(0.5f),
                     layers::Dense(6, "mish"), layers::Dense(3, "softsign")},
                    "activation_convnet");
}

TEST(ActivationLayersModel, SavesAndLoadsInBothFormats) {
  set_random_seed(4);
  Sequential model = activation_convnet();
  const Tensor x = test::random_uniform(Shape{5, 6, 6, 2}, 3, -2.0f, 2.0f);
  const Tensor want = model.predict(x);
  for (const std::string file : {"activations.keras", "activations_folder"}) {
    const std::string path = tmp_dir() + "/" + file;
    std::filesystem::remove_all(path);
    save_model(model, path);
    const auto loaded = load_model(path);
    EXPECT_TRUE(same_bits(loaded->predict(x), want)) << file;
    ASSERT_EQ(loaded->layers().size(), model.layers().size()) << file;
    for (std::size_t i = 0; i < model.layers().size(); ++i)
      EXPECT_EQ(loaded->layers()[i]->get_config(), model.layers()[i]->get_config()) << file << " layer " << i;
    const auto vars = loaded->variables();
    ASSERT_EQ(vars.size(), model.variables().size()) << file;
    for (std::size_t i = 0; i < vars.size(); ++i)
      EXPECT_TRUE(same_bits(vars[i].read_value(), model.variables()[i].read_value())) << file << " " << vars[i].name();
  }
}

TEST(ActivationLayersModel, FitTrainsPreluAlphaAndEveryOtherWeight) {
  set_random_seed(5);
  Sequential model = activation_convnet();
  const Tensor x = test::random_uniform(Shape{32, 6, 6, 2}, 6, -2.0f, 2.0f);
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 3);
  const Tensor y = Tensor::from_vector(labels, Shape{32});
  model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  std::vector<Tensor> before;
  for (const auto& v : model.variables()) before.push_back(v.read_value().clone());
  ::testing::internal::CaptureStderr();
  (void)model.fit(x, y, {.epochs = 1, .batch_size = 8, .verbose = 0});
  (void)::testing::internal::GetCapturedStderr();
  const auto vars = model.variables();
  for (std::size_t i = 0; i < vars.size(); ++i)
    EXPECT_FALSE(same_bits(vars[i].read_value(), before[i])) << vars[i].name() << " did not change";
}

}  // namespace
}  // namespace lockstep
