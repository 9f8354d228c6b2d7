// Keras files whose model holds a model (keras.io's transfer learning: base_model(x, training=False)
// inside a Functional): Keras writes the inner model as one layer entry (class Sequential or
// Functional, its whole config inside) and its weights under that layer's group
// (layers/sequential/layers/dense/vars). lockstep loads such a file as the model lockstep::call
// makes (the inner layers flattened into the outer graph, the call's training= kept), with its
// weights and optimizer state; hostile nesting is an IOError naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::inputs;
using test::io_message_of;
using test::same_bits;

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

std::string fresh_dir(const std::string& name) {
  const std::string d = test::fresh_test_dir("keras_nested", name);
  std::filesystem::create_directories(d);
  return d;
}

// base: Dense 'd1' -> BatchNormalization 'bn' (statistics away from 0 and 1), frozen as keras.io's
// guide does; outer: x -> base(x, training=False) -> Dense 'head', compiled and trained a step.
struct TransferModel {
  std::shared_ptr<Sequential> base;
  std::unique_ptr<Functional> outer;
};
TransferModel transfer_model() {
  auto d1 = layers::Dense(3, "relu");
  d1->set_name("d1");
  auto bn = layers::BatchNormalization();
  bn->set_name("bn");
  auto base = std::make_shared<Sequential>(std::vector<layers::LayerPtr>{layers::Input(Shape{4}), d1, bn}, "base");
  bn->variables()[2].assign(Tensor::from_vector(std::vector<float>{0.3f, -0.2f, 0.5f}, Shape{3}));
  bn->variables()[3].assign(Tensor::from_vector(std::vector<float>{1.5f, 0.7f, 2.0f}, Shape{3}));
  base->set_trainable(false);
  const KerasTensor x = Input(Shape{4}, "x");
  auto head = layers::Dense(2);
  head->set_name("head");
  auto outer = std::make_unique<Functional>(x, call(head, call(*base, {x}, {.training = false}).front()), "outer");
  outer->compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  outer->train_step(inputs(8, 4), inputs(8, 2));
  return {base, std::move(outer)};
}

using Entries = std::vector<io::ZipEntry>;
json& entry_json(Entries& entries, const std::string& name, json& parsed) {
  for (auto& e : entries)
    if (e.name == name) parsed = json::parse(e.bytes);
  return parsed;
}
void put(Entries& entries, const std::string& name, const std::string& bytes) {
  for (auto& e : entries)
    if (e.name == name) e.bytes = bytes;
}

// The file Keras writes for transfer_model(): lockstep's flattened file with d1 and bn gathered
// into one Sequential entry 'base' (base's own file's config), their weights under its group.
struct NestedFile {
  Entries entries;
  json config;
  io::H5Content weights;
  void write(const std::string& path) {
    put(entries, "config.json", config.dump());
    put(entries, "model.weights.h5", io::encode_hdf5(weights));
    io::write_file_atomic(path, io::encode_zip(entries));
  }
};
NestedFile nested_file(TransferModel& m, const std::string& dir) {
  save_model(*m.outer, dir + "/flat.keras");
  save_model(*m.base, dir + "/base.keras");
  NestedFile f{io::decode_zip(io::read_file(dir + "/flat.keras"), "flat.keras"), {}, {}};
  Entries base_entries = io::decode_zip(io::read_file(dir + "/base.keras"), "base.keras");
  json base_config;
  entry_json(base_entries, "config.json", base_config);
  json flat;
  entry_json(f.entries, "config.json", flat);
  const json& layers = flat["config"]["layers"];
  EXPECT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[1]["name"], "d1");
  EXPECT_EQ(layers[2]["name"], "bn");
  json base = base_config;
  base["name"] = "base";
  base["inbound_nodes"] = layers[1]["inbound_nodes"];  // x, training=False
  EXPECT_EQ(base["inbound_nodes"][0]["kwargs"], json({{"training", false}}));
  json head = layers[3];
  head["inbound_nodes"][0]["args"][0]["config"]["keras_history"] = json::array({"base", 0, 0});
  f.config = flat;
  f.config["config"]["layers"] = json::array({layers[0], base, head});

  for (const auto& e : f.entries)
    if (e.name == "model.weights.h5") f.weights = io::decode_hdf5(e.bytes, "flat weights");
  const std::vector<std::pair<std::string, std::string>> moves{
      {"layers/dense", "layers/sequential/layers/dense"},
      {"layers/batch_normalization", "layers/sequential/layers/batch_normalization"},
      {"layers/dense_1", "layers/dense"}};
  const auto moved = [&](const std::string& path) {
    for (const auto& [from, to] : moves)
      if (path == from || path.rfind(from + '/', 0) == 0) return to + path.substr(from.size());
    return path;
  };
  for (auto& g : f.weights.groups) g.path = moved(g.path);
  for (auto& d : f.weights.datasets) d.path = moved(d.path);
  return f;
}

TEST(KerasNested, ASequentialCalledInAFunctionalLoadsAsTheModelCallMakes) {
  const std::string dir = fresh_dir("transfer");
  TransferModel m = transfer_model();
  NestedFile f = nested_file(m, dir);
  f.write(dir + "/nested.keras");

  auto loaded = load_model(dir + "/nested.keras");
  const auto& fn = dynamic_cast<const Functional&>(*loaded);
  std::vector<std::string> names;
  for (const auto& l : loaded->layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "d1", "bn", "head"}));
  // The inner call's training=False on each of its layers' calls; the frozen base stays frozen.
  for (const auto& node : fn.nodes()) {
    const std::string& layer = loaded->layers()[node.layer]->name();
    const std::optional<bool> want = layer == "head" ? std::nullopt : std::optional<bool>(false);
    if (layer != "x") {
      EXPECT_EQ(node.training, want) << layer;
    }
  }
  EXPECT_FALSE(loaded->layers()[1]->trainable());
  EXPECT_FALSE(loaded->layers()[2]->trainable());
  EXPECT_TRUE(loaded->layers()[3]->trainable());
  const Tensor x = inputs(5, 4);
  EXPECT_TRUE(same_bits(loaded->predict(x), m.outer->predict(x)));
  test::expect_same_variables(*loaded, *m.outer);

  // The optimizer's state came with it: a step after load is the step the original takes.
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->iterations(), 1);
  loaded->train_step(inputs(8, 4), inputs(8, 2));
  m.outer->train_step(inputs(8, 4), inputs(8, 2));
  test::expect_same_variables(*loaded, *m.outer);

  // lockstep writes it flattened, and loads that back the same.
  save_model(*loaded, dir + "/again.keras");
  auto again = load_model(dir + "/again.keras");
  EXPECT_TRUE(same_bits(again->predict(x), loaded->predict(x)));
  EXPECT_FALSE(again->layers()[2]->trainable());
  EXPECT_EQ(dynamic_cast<const Functional&>(*again).nodes()[2].training, std::optional<bool>(false));
}

// keras.Sequential([Input, base, Dense]) holds the base as a layer too: lockstep's Sequential holds
// layers only, so it loads as a Functional of the same layers (its name, its predictions).
TEST(KerasNested, AModelInASequentialLoadsAsAFunctional) {
  const std::string dir = fresh_dir("in_sequential");
  TransferModel m = transfer_model();
  NestedFile f = nested_file(m, dir);
  json& layers = f.config["config"]["layers"];
  json seq = {{"module", "keras"},
              {"class_name", "Sequential"},
              {"config",
               {{"name", "outer_seq"},
                {"trainable", true},
                {"layers", json::array({layers[0], layers[1], layers[2]})},
                {"build_input_shape", json::array({nullptr, 4})}}},
              {"compile_config", f.config["compile_config"]}};
  for (auto& l : seq["config"]["layers"]) l.erase("inbound_nodes");
  f.config = seq;
  f.write(dir + "/seq.keras");
  auto loaded = load_model(dir + "/seq.keras");
  EXPECT_NE(dynamic_cast<const Functional*>(loaded.get()), nullptr);
  EXPECT_EQ(loaded->name(), "outer_seq");
  const Tensor x = inputs(5, 4);
  // The Sequential's call gives the base no training=: the base then follows predict's mode
  // (inference), which is what the Functional's training=False gave.
  EXPECT_TRUE(same_bits(loaded->predict(x), m.outer->predict(x)));
}

TEST(KerasNested, HostileNestingIsAnIOErrorNamingIt) {
  const std::string dir = fresh_dir("hostile");
  TransferModel m = transfer_model();
  {  // a layer of a class lockstep lacks, inside the nested model
    NestedFile f = nested_file(m, dir);
    f.config["config"]["layers"][1]["config"]["layers"][2]["class_name"] = "Frobnicate";
    f.write(dir + "/unknown.keras");
    EXPECT_HAS(io_message_of([&] { load_model(dir + "/unknown.keras"); }),
               "unknown.keras': layer 'bn' (Frobnicate): this layer class is not supported by lockstep");
  }
  {  // its weights' group missing
    NestedFile f = nested_file(m, dir);
    std::erase_if(f.weights.datasets, [](const io::H5Dataset& d) {
      return d.path.rfind("layers/sequential/layers/batch_normalization/", 0) == 0;
    });
    std::erase_if(f.weights.groups, [](const io::H5Group& g) {
      return g.path.rfind("layers/sequential/layers/batch_normalization", 0) == 0;
    });
    f.write(dir + "/no_group.keras");
    EXPECT_HAS(io_message_of([&] { load_model(dir + "/no_group.keras"); }),
               "has no group layers/sequential/layers/batch_normalization/vars for layer 'bn' (BatchNormalization)");
  }
  {  // the weights of a flattened file: the groups the nested config asks for are not there
    NestedFile f = nested_file(m, dir);
    for (const auto& e : f.entries)
      if (e.name == "model.weights.h5") f.weights = io::decode_hdf5(e.bytes, "flat weights");
    f.write(dir + "/flat_weights.keras");
    EXPECT_HAS(io_message_of([&] { load_model(dir + "/flat_weights.keras"); }),
               "has no group layers/sequential/layers/dense/vars for layer 'd1' (Dense)");
  }
  {  // models nested beyond the bound: 'base' inside 17 Sequentials
    NestedFile f = nested_file(m, dir);
    json inner = f.config["config"]["layers"][1];
    const json nodes = inner["inbound_nodes"];
    inner.erase("inbound_nodes");
    for (int level = 0; level < 17; ++level) {
      std::string name = "s";
      name += std::to_string(level);
      inner = {{"class_name", "Sequential"},
               {"config", {{"name", name}, {"layers", json::array({inner})},
                           {"build_input_shape", json::array({nullptr, 4})}}}};
    }
    inner["name"] = "s16";
    inner["inbound_nodes"] = nodes;
    f.config["config"]["layers"][1] = inner;
    f.config["config"]["layers"][2]["inbound_nodes"][0]["args"][0]["config"]["keras_history"][0] = "s16";
    f.write(dir + "/deep.keras");
    EXPECT_HAS(io_message_of([&] { load_model(dir + "/deep.keras"); }),
               "deep.keras': model 's0' is nested 17 levels deep (a model in a model ...), more than lockstep's "
               "bound of 16");
  }
}

}  // namespace
}  // namespace lockstep
