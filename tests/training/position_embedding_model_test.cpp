// PositionEmbedding inside a Functional model, as a ViT or GPT uses it (x + PositionEmbedding(x)):
// it trains through fit, saves and loads bit for bit in lockstep's folder format, as a .keras
// archive (keras_hub's config names, the initializer as a Keras object) and as a checkpoint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/merge_layers.hpp"
#include "lockstep/layers/position_embedding.hpp"
#include "training/layer_in_model_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::expect_same_variables;
using test::labels;
using test::same_bits;

Tensor sequences(std::int64_t n) { return test::inputs(n, 5 * 4).reshape({n, 5, 4}); }

std::unique_ptr<Functional> positional_model() {
  const KerasTensor in = Input({5, 4});
  return test::three_class_model(in, call(layers::Add(), {in, call(layers::PositionEmbedding(5), in)}), "positional");
}

TEST(PositionEmbeddingModel, TrainsThroughFit) {
  auto model = positional_model();
  const auto& table = model->layers()[1]->variables().at(0);
  EXPECT_EQ(table.name(), "position_embedding/embeddings");
  EXPECT_EQ(table.shape(), (Shape{5, 4}));
  const auto before = table.read_value().to_vector<float>();
  const auto history = model->fit(sequences(48), labels(48, 3), {.epochs = 6, .batch_size = 8, .verbose = 0});
  const auto& loss = history.history.at("loss");
  EXPECT_LT(loss.back(), loss.front());
  EXPECT_NE(table.read_value().to_vector<float>(), before);
}

TEST(PositionEmbeddingModel, SavesAndLoadsInBothFormatsAndAsACheckpoint) {
  auto model = positional_model();
  model->fit(sequences(16), labels(16, 3), {.epochs = 1, .batch_size = 8, .verbose = 0});
  const std::string dir = test::fresh_test_dir("position_embedding", "both_formats");
  test::expect_round_trip_in_both_formats(*model, dir, sequences(5));
  io::save_checkpoint(dir + "/ckpt", model->variables(), model->optimizer().get(), io::TrainingState{});
  auto fresh = positional_model();
  io::load_checkpoint(dir + "/ckpt", fresh->variables(), fresh->optimizer().get());
  expect_same_variables(*model, *fresh);
}

// Laid out as keras_hub writes it (its module and registered name); a config with another
// initializer, written as a Keras object, loads.
TEST(PositionEmbeddingModel, KerasArchiveHasKerasHubsConfig) {
  auto model = positional_model();
  const std::string path = test::fresh_test_dir("position_embedding", "layout") + ".keras";
  std::filesystem::remove(path);
  save_model(*model, path);
  auto entries = io::decode_zip(io::read_file(path), path);
  json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  json& pe = config["config"]["layers"][1];
  EXPECT_EQ(pe["class_name"], "PositionEmbedding");
  EXPECT_EQ(pe["module"], "keras_hub.src.layers.modeling.position_embedding");
  EXPECT_EQ(pe["registered_name"], "keras_hub>PositionEmbedding");
  EXPECT_EQ(pe["config"]["sequence_length"], 5);
  EXPECT_EQ(pe["config"]["initializer"]["class_name"], "GlorotUniform");
  const io::H5Content h5 = io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, "h5", {});
  const Tensor* t = h5.find_dataset("layers/position_embedding/vars/0");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(same_bits(*t, model->layers()[1]->variables()[0].read_value()));

  pe["config"]["initializer"] = {{"module", "keras.initializers"},
                                 {"class_name", "HeNormal"},
                                 {"config", {{"seed", nullptr}}},
                                 {"registered_name", nullptr}};
  for (auto& e : entries)
    if (e.name == "config.json") e.bytes = config.dump();
  io::write_file_atomic(path, io::encode_zip(entries));
  auto loaded = load_model(path);
  EXPECT_EQ(loaded->layers()[1]->get_config()["initializer"], "he_normal");
  EXPECT_TRUE(same_bits(model->predict(sequences(3)), loaded->predict(sequences(3))));
}

}  // namespace
}  // namespace lockstep
