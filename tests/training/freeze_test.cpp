// Keras' freezing (layer.trainable = false, model.trainable = false): what fit leaves alone and
// what it trains, when the setting takes effect (compile), BatchNormalization's inference mode,
// and the files and checkpoints that keep it.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/training/saved_model.hpp"
#include "lockstep/training/sequential.hpp"
#include "training/model_io_test_util.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {

using nlohmann::json;
using test::message_of;

std::vector<std::vector<float>> values_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (const auto& v : vars) out.push_back(v.read_value().to_vector<float>());
  return out;
}

// A base (Dense 6 -> 8) and a head (Dense 8 -> 3), built, the same weights every time.
std::unique_ptr<Sequential> base_and_head() {
  set_random_seed(11);
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "tanh", 6), layers::Dense(3, "softmax")});
  m->build(Shape{-1, 6});
  return m;
}

const test::Classification& data() {
  static const test::Classification d = test::random_classification(96, 6, 3, 5);
  return d;
}

const FitOptions kFit{.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0};

struct FrozenCase {
  std::string optimizer;
  int replicas;
};

class FrozenFit : public ::testing::TestWithParam<FrozenCase> {};

// The frozen base keeps its bits through fit (no gradient, no update, no slot) while the head
// trains: with momentum's and Adam's slots, on one CPU replica and on two.
TEST_P(FrozenFit, TheFrozenLayerKeepsItsBitsWhileTheOthersTrain) {
  const FrozenCase c = GetParam();
  distribute::MirroredStrategy strategy({.num_cpu_devices = c.replicas});
  auto scope = strategy.scope();
  auto m = base_and_head();
  const auto& base = m->layers()[0];
  const auto& head = m->layers()[1];
  base->set_trainable(false);
  EXPECT_FALSE(base->trainable());
  ASSERT_EQ(m->trainable_variables().size(), 2u);
  EXPECT_TRUE(m->trainable_variables()[0].is_same(head->variables()[0]));
  ASSERT_EQ(m->non_trainable_variables().size(), 2u);
  EXPECT_TRUE(m->non_trainable_variables()[0].is_same(base->variables()[0]));
  EXPECT_TRUE(base->trainable_variables().empty());
  m->compile(c.optimizer == "sgd" ? optimizers::SGD(0.1, 0.9) : optimizers::Adam(0.05),
             losses::SparseCategoricalCrossentropy());
  const auto base_before = values_of(base->variables()), head_before = values_of(head->variables());
  m->fit(data().x, data().y, kFit);
  EXPECT_EQ(values_of(base->variables()), base_before);
  EXPECT_NE(values_of(head->variables()), head_before);
}

INSTANTIATE_TEST_SUITE_P(OptimizersAndReplicas, FrozenFit,
                         ::testing::Values(FrozenCase{"sgd", 1}, FrozenCase{"adam", 1}, FrozenCase{"sgd", 2},
                                           FrozenCase{"adam", 2}),
                         [](const auto& info) {
                           return info.param.optimizer + "_cpu" + std::to_string(info.param.replicas);
                         });

// The head under a frozen base trains as the head alone does on the base's outputs, given as
// data: the base's gradients feed nothing and move nothing (an update of the wrong variable, a
// gradient of the base's applied to the head's, would part them).
TEST(Freeze, TheHeadTrainsAsOnTheFrozenBasesOutputsGivenAsData) {
  auto m = base_and_head();
  m->layers()[0]->set_trainable(false);
  m->compile(optimizers::Adam(0.05), losses::SparseCategoricalCrossentropy());
  const Tensor features = m->layers()[0]->call(data().x, layers::CallContext{});
  auto head = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{layers::Dense(3, "softmax", 8)});
  head->build(Shape{-1, 8});
  for (std::size_t i = 0; i < 2; ++i) head->variables()[i].assign(m->layers()[1]->variables()[i].read_value());
  head->compile(optimizers::Adam(0.05), losses::SparseCategoricalCrossentropy());
  m->fit(data().x, data().y, kFit);
  head->fit(features, data().y, kFit);
  const auto a = values_of(m->layers()[1]->variables()), b = values_of(head->variables());
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) EXPECT_NEAR(a[i][j], b[i][j], 1e-5) << "variable " << i << " [" << j << "]";
}

// Keras' rule for BatchNormalization: frozen, it runs in inference mode inside fit (its moving
// statistics normalise, and stay as they were), so a training call gives the inference output.
TEST(Freeze, AFrozenBatchNormalizationUsesAndKeepsItsMovingStatisticsInFit) {
  for (const bool frozen : {true, false}) {
    set_random_seed(13);
    auto bn = layers::BatchNormalization();
    auto m = std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(4, "linear", 6), bn, layers::Dense(3, "softmax")});
    bn->set_trainable(!frozen);  // before the build: its weights are made frozen
    m->build(Shape{-1, 6});
    m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy());
    const auto stats_before = values_of(bn->variables());
    const Tensor in_training = (*m)(data().x, layers::CallContext{.training = true});
    const std::vector<float> inference = (*m)(data().x).to_vector<float>();
    m->fit(data().x, data().y, kFit);
    if (frozen) {
      EXPECT_EQ(in_training.to_vector<float>(), inference);
      EXPECT_EQ(values_of(bn->variables()), stats_before) << "gamma, beta and the moving statistics";
      EXPECT_EQ(m->trainable_variables().size(), 4u);  // the two Dense layers'
    } else {  // the test's own check: unfrozen, fit moves them
      EXPECT_NE(in_training.to_vector<float>(), inference);
      EXPECT_NE(values_of(bn->variables()), stats_before);
    }
  }
}

// keras.io's fine-tuning: freeze the base, compile, fit the head; unfreeze, compile again with a
// new (slower) optimizer, fit: now the base trains too.
TEST(Freeze, UnfrozenAndCompiledAgainTheBaseTrains) {
  auto m = base_and_head();
  const auto& base = m->layers()[0];
  m->set_trainable(false);
  EXPECT_FALSE(m->trainable());
  EXPECT_FALSE(base->trainable());
  m->layers()[1]->set_trainable(true);  // the head alone
  m->compile(optimizers::Adam(0.05), losses::SparseCategoricalCrossentropy());
  const auto base_before = values_of(base->variables());
  m->fit(data().x, data().y, kFit);
  EXPECT_EQ(values_of(base->variables()), base_before);
  m->set_trainable(true);
  EXPECT_EQ(m->trainable_variables().size(), 4u);
  m->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy());
  const auto head_before = values_of(m->layers()[1]->variables());
  m->fit(data().x, data().y, kFit);
  EXPECT_NE(values_of(base->variables()), base_before);
  EXPECT_NE(values_of(m->layers()[1]->variables()), head_before);
}

// A setting changed after compile, without compiling again, is refused at the next train step,
// naming the layer and the fix (Keras would silently go on training compile's weights); set back,
// or compiled again, fit goes on.
TEST(Freeze, AChangeAfterCompileIsRefusedUntilCompiledAgain) {
  auto m = base_and_head();
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy());
  m->fit(data().x, data().y, kFit);
  const auto& base = m->layers()[0];
  base->set_trainable(false);
  const auto before = values_of(m->variables());
  const std::string e = message_of([&] { m->fit(data().x, data().y, kFit); });
  EXPECT_NE(e.find("layer '" + base->name() + "' was set trainable = false after compile()"), std::string::npos) << e;
  EXPECT_NE(e.find("call compile() again"), std::string::npos) << e;
  EXPECT_EQ(values_of(m->variables()), before) << "nothing trained";
  base->set_trainable(true);  // as compiled
  EXPECT_NO_THROW(m->train_step(data().x, data().y));
  base->set_trainable(false);
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy());
  const auto frozen = values_of(base->variables());
  m->fit(data().x, data().y, kFit);
  EXPECT_EQ(values_of(base->variables()), frozen);
  // Evaluate and predict read no trainable setting: they run whatever it is.
  base->set_trainable(true);
  EXPECT_NO_THROW(m->evaluate(data().x, data().y));
}

// Everything frozen: fit runs (losses, metrics) and changes no weight, as Keras.
TEST(Freeze, AModelFrozenWholeFitsWithoutChangingAWeight) {
  auto m = base_and_head();
  m->set_trainable(false);
  EXPECT_TRUE(m->trainable_variables().empty());
  m->compile(optimizers::Adam(0.05), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const auto before = values_of(m->variables());
  const History h = m->fit(data().x, data().y, kFit);
  EXPECT_EQ(h.history.at("loss").size(), 2u);
  EXPECT_EQ(values_of(m->variables()), before);
}

TEST(Freeze, TheSummaryCountsAFrozenLayersWeightsAsNonTrainable) {
  auto m = base_and_head();
  m->layers()[0]->set_trainable(false);
  const std::string s = m->summary();
  EXPECT_NE(s.find("Trainable params: 27\n"), std::string::npos) << s;  // the head: 8 x 3 + 3
  EXPECT_NE(s.find("Non-trainable params: 56\n"), std::string::npos) << s;  // the base: 6 x 8 + 8
}

// Both file formats write a frozen layer's "trainable": false and read it back (Keras writes the
// key in every layer's config); the weights come back too.
TEST(Freeze, SavedFoldersAndKerasFilesKeepAFrozenLayer) {
  auto m = base_and_head();
  m->layers()[0]->set_trainable(false);
  m->compile(optimizers::Adam(0.05), losses::SparseCategoricalCrossentropy());
  m->fit(data().x, data().y, kFit);
  const std::string dir = test::fresh_test_dir("freeze", "formats");
  for (const std::string& path : {dir + "/saved", dir + "/m.keras"}) {
    SCOPED_TRACE(path);
    save_model(*m, path);
    auto loaded = load_model(path);
    const auto& ls = loaded->layers();
    const std::size_t skip = ls.front()->class_name() == "InputLayer" ? 1 : 0;
    ASSERT_EQ(ls.size(), 2 + skip);
    EXPECT_FALSE(ls[skip]->trainable());
    EXPECT_TRUE(ls[skip + 1]->trainable());
    EXPECT_EQ(loaded->trainable_variables().size(), 2u);
    EXPECT_EQ(values_of(loaded->variables()), values_of(m->variables()));
    // Loaded and compiled from the file, the frozen layer stays as it was through fit.
    const auto frozen = values_of(ls[skip]->variables());
    loaded->fit(data().x, data().y, kFit);
    EXPECT_EQ(values_of(ls[skip]->variables()), frozen);
  }
  const json config =
      json::parse(io::find_entry(io::decode_zip(io::read_file(dir + "/m.keras"), "m.keras"), "config.json")->bytes);
  const json& layer_list = config["config"]["layers"];
  ASSERT_EQ(layer_list.size(), 3u);  // the InputLayer, then the two Dense layers
  EXPECT_EQ(layer_list[1]["config"]["trainable"], false);
  EXPECT_EQ(layer_list[2]["config"]["trainable"], true);
}

// A Keras file's "trainable" that is not a boolean is named, not guessed at.
TEST(Freeze, AKerasFilesTrainableThatIsNoBooleanIsNamed) {
  auto m = base_and_head();
  const std::string dir = test::fresh_test_dir("freeze", "bad_flag");
  std::filesystem::create_directories(dir);
  save_model(*m, dir + "/m.keras");
  auto entries = io::decode_zip(io::read_file(dir + "/m.keras"), "m.keras");
  for (auto& e : entries) {
    if (e.name != "config.json") continue;
    json config = json::parse(e.bytes);
    config["config"]["layers"][1]["config"]["trainable"] = "no";
    e.bytes = config.dump();
  }
  io::write_file_atomic(dir + "/bad.keras", io::encode_zip(entries));
  try {
    load_model(dir + "/bad.keras");
    ADD_FAILURE() << "loaded";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'dense' (Dense): trainable=\"no\" is not a boolean"), std::string::npos)
        << e.what();
  }
}

// A checkpoint holds the frozen layer's weights (they are the model's) and restores them.
TEST(Freeze, CheckpointsSaveAndRestoreFrozenWeights) {
  auto m = base_and_head();
  const auto& base = m->layers()[0];
  base->set_trainable(false);
  m->compile(optimizers::Adam(0.05), losses::SparseCategoricalCrossentropy());
  m->fit(data().x, data().y, kFit);
  const std::string prefix = test::fresh_test_dir("freeze", "checkpoint") + "/ckpt";
  io::save_checkpoint(prefix, m->variables(), m->optimizer().get(), {});
  const auto saved = values_of(m->variables());
  for (const auto& v : m->variables()) v.assign(Tensor::zeros(v.shape()));
  io::load_checkpoint(prefix, m->variables(), m->optimizer().get());
  EXPECT_EQ(values_of(m->variables()), saved);
}

}  // namespace
}  // namespace lockstep
