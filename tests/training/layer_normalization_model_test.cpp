// LayerNormalization inside a model: it trains through fit and saves and loads, bit for bit, in
// lockstep's folder format and as a Keras 3 .keras archive with Keras' names and defaults.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/layer_normalization.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::expect_same_variables;
using test::inputs;
using test::labels;
using test::same_bits;

std::unique_ptr<Sequential> model_with_layer_norm() {
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{}, "ln_mlp");
  m->set_seed(7);
  for (auto layer : {layers::Dense(8, "relu", 6), layers::LayerNormalization(),
                     layers::LayerNormalization({.epsilon = 1e-2f, .center = false}), layers::Dense(3, "softmax")})
    m->add(layer);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

TEST(LayerNormalizationModel, TrainsThroughFit) {
  auto model = model_with_layer_norm();
  const Tensor x = inputs(48, 6), y = labels(48, 3);
  const auto gamma_before = model->layers()[1]->variables()[0].read_value().to_vector<float>();
  const auto history = model->fit(x, y, {.epochs = 8, .batch_size = 8, .verbose = 0});
  const auto& loss = history.history.at("loss");
  EXPECT_LT(loss.back(), loss.front());
  EXPECT_NE(model->layers()[1]->variables()[0].read_value().to_vector<float>(), gamma_before);
  EXPECT_EQ(model->layers()[1]->variables()[0].name(), "layer_normalization/gamma");
  EXPECT_EQ(model->layers()[2]->variables()[0].name(), "layer_normalization_1/gamma");
}

void expect_same_model(Model& a, Model& b) {
  expect_same_variables(a, b);
  const Tensor x = inputs(5, 6);
  EXPECT_TRUE(same_bits(a.predict(x), b.predict(x)));
  // A .keras load starts with Keras' InputLayer (which replaces the first Dense's input_dim).
  const auto& lb = b.layers();
  const std::size_t skip = lb.front()->class_name() == "InputLayer" ? 1 : 0;
  ASSERT_EQ(lb.size(), a.layers().size() + skip);
  for (std::size_t i = 1; i < a.layers().size(); ++i)
    EXPECT_EQ(a.layers()[i]->get_config(), lb[i + skip]->get_config());
}

TEST(LayerNormalizationModel, SavesAndLoadsInBothFormats) {
  auto model = model_with_layer_norm();
  model->fit(inputs(16, 6), labels(16, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
  const std::string dir = test::fresh_test_dir("layer_normalization", "both_formats");
  save_model(*model, dir + "/saved");
  expect_same_model(*model, *load_model(dir + "/saved"));
  save_model(*model, dir + ".keras");
  expect_same_model(*model, *load_model(dir + ".keras"));
}

TEST(LayerNormalizationModel, KerasArchiveHasKerasConfigAndWeightOrder) {
  auto model = model_with_layer_norm();
  const std::string path = test::fresh_test_dir("layer_normalization", "layout") + ".keras";
  std::filesystem::remove(path);
  save_model(*model, path);
  const auto entries = io::decode_zip(io::read_file(path), path);
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  const json& ln = config["config"]["layers"][2];
  EXPECT_EQ(ln["class_name"], "LayerNormalization");
  EXPECT_EQ(ln["module"], "keras.layers");
  const json& c = ln["config"];
  EXPECT_EQ(c["name"], "layer_normalization");
  EXPECT_EQ(c["axis"], -1);
  EXPECT_NEAR(c["epsilon"].get<double>(), 1e-3, 1e-9);
  EXPECT_EQ(c["center"], true);
  EXPECT_EQ(c["scale"], true);
  EXPECT_EQ(c["gamma_initializer"]["class_name"], "Ones");
  EXPECT_EQ(c["beta_initializer"]["class_name"], "Zeros");
  EXPECT_EQ(c["dtype"]["config"]["name"], "float32");
  EXPECT_EQ(c["trainable"], true);
  EXPECT_EQ(config["config"]["layers"][3]["config"]["center"], false);

  // Keras' weight order: gamma, then beta.
  const io::H5Content h5 = io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, "h5", {});
  const auto vars = model->layers()[1]->variables();
  for (std::size_t i = 0; i < 2; ++i) {
    const Tensor* t = h5.find_dataset("layers/layer_normalization/vars/" + std::to_string(i));
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(same_bits(*t, vars[i].read_value())) << vars[i].name();
  }
}

// The config Keras 3 itself writes (its off arguments included) loads; an unsupported one is named.
TEST(LayerNormalizationModel, ReadsKeras3sOwnConfig) {
  auto model = model_with_layer_norm();
  const std::string path = test::fresh_test_dir("layer_normalization", "keras3") + ".keras";
  save_model(*model, path);
  auto entries = io::decode_zip(io::read_file(path), path);
  json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  json& ln = config["config"]["layers"][2]["config"];
  ln.update({{"epsilon", 0.001}, {"rms_scaling", false}, {"beta_regularizer", nullptr},
             {"gamma_regularizer", nullptr}, {"beta_constraint", nullptr}, {"gamma_constraint", nullptr}});
  const auto write = [&] {
    for (auto& e : entries)
      if (e.name == "config.json") e.bytes = config.dump();
    io::write_file_atomic(path, io::encode_zip(entries));
  };
  write();
  auto loaded = load_model(path);
  const auto& read = dynamic_cast<const layers::LayerNormalizationLayer&>(*loaded->layers()[2]);
  EXPECT_EQ(read.options().epsilon, 1e-3f);
  EXPECT_TRUE(test::same_bits(model->predict(inputs(3, 6)), loaded->predict(inputs(3, 6))));

  ln["rms_scaling"] = true;
  write();
  const std::string m = test::io_message_of([&] { load_model(path); });
  EXPECT_NE(m.find("layer 'layer_normalization' (LayerNormalization): argument rms_scaling=true"), std::string::npos)
      << m;
}

}  // namespace
}  // namespace lockstep
