// SimpleRNN, LSTM and GRU inside models: Embedding(mask_zero=True) -> LSTM -> Dense learns a
// sequence task through fit on padded batches; the three layers save and load, bit for bit, in
// lockstep's folder format and as a Keras 3 .keras archive (weights under the layer's cell, as
// Keras 3 writes them); mixed_float16 computes what float32 does; a .keras file asking for an
// option lockstep does not run is refused naming it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/lockstep.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::same_bits;

constexpr std::int64_t kVocab = 8, kSteps = 9;

// Rows of 2 .. kSteps tokens in [2, kVocab), padded with 0 at the end; the label: whether token 1
// is among them (half the rows have it, at a random step).
struct Sequences {
  Tensor x, y;
};
Sequences sequences(std::int64_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> x(static_cast<std::size_t>(n * kSteps), 0.0f), y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t len = 2 + static_cast<std::int64_t>(rng() % (kSteps - 1));
    for (std::int64_t t = 0; t < len; ++t)
      x[static_cast<std::size_t>(i * kSteps + t)] = static_cast<float>(2 + rng() % (kVocab - 2));
    const bool has = rng() % 2 == 0;
    if (has) x[static_cast<std::size_t>(i * kSteps) + rng() % static_cast<std::uint64_t>(len)] = 1.0f;
    y[static_cast<std::size_t>(i)] = has ? 1.0f : 0.0f;
  }
  return {Tensor::from_vector(x, {n, kSteps}), Tensor::from_vector(y, {n, 1})};
}

std::unique_ptr<Sequential> lstm_classifier() {
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{}, "lstm_classifier");
  m->set_seed(3);
  for (auto layer :
       {layers::Input({kSteps}), layers::Embedding(kVocab, 8, true), layers::LSTM(16), layers::Dense(1, "sigmoid")})
    m->add(layer);
  m->compile(optimizers::Adam(2e-2), losses::BinaryCrossentropy(), {"accuracy"});
  return m;
}

TEST(RecurrentModel, EmbeddingMaskZeroLstmDenseLearnsWhetherATokenAppears) {
  auto model = lstm_classifier();
  const Sequences train = sequences(512, 1), test = sequences(256, 2);
  model->fit(train.x, train.y, {.epochs = 12, .batch_size = 32, .verbose = 0});
  EXPECT_GT(model->evaluate(test.x, test.y, {.batch_size = 128}).at("accuracy"), 0.95);  // chance: 0.5
}

// Each layer in a Functional model: stacked with return_sequences, one going backwards with dropout.
std::unique_ptr<Functional> stacked_model() {
  const KerasTensor in = Input({kSteps});
  KerasTensor x = call(layers::Embedding(kVocab, 4, true), in);
  x = call(layers::SimpleRNN({.units = 5, .return_sequences = true}), x);
  layers::RecurrentOptions gru{.units = 4, .return_sequences = true, .go_backwards = true};
  gru.reset_after = false;
  gru.dropout = 0.1f;
  gru.recurrent_dropout = 0.2f;
  x = call(layers::GRU(gru), x);
  x = call(layers::GRU(3, true), x);
  x = call(layers::LSTM({.units = 4, .unit_forget_bias = false}), x);
  auto m = std::make_unique<Functional>(in, call(layers::Dense(2, "softmax"), x), "stacked", 5);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

void expect_same_model(Model& a, Model& b, const Tensor& x) {
  test::expect_same_variables(a, b);
  EXPECT_TRUE(same_bits(a.predict(x), b.predict(x)));
  ASSERT_EQ(a.layers().size(), b.layers().size());
  for (std::size_t i = 1; i < a.layers().size(); ++i)
    EXPECT_EQ(a.layers()[i]->get_config(), b.layers()[i]->get_config()) << a.layers()[i]->name();
}

TEST(RecurrentModel, SavesAndLoadsInBothFormats) {
  auto model = stacked_model();
  const Sequences data = sequences(32, 3);
  Tensor labels = cast(data.y.reshape({32}), DType::kI64);
  model->fit(data.x, labels, {.epochs = 1, .batch_size = 8, .verbose = 0});
  const std::string dir = test::fresh_test_dir("recurrent_model", "both_formats");
  save_model(*model, dir + "/saved");
  expect_same_model(*model, *load_model(dir + "/saved"), data.x);
  save_model(*model, dir + ".keras");
  expect_same_model(*model, *load_model(dir + ".keras"), data.x);
}

TEST(RecurrentModel, KerasArchiveKeepsTheWeightsUnderTheCellWithKerasConfig) {
  auto model = stacked_model();
  const std::string path = test::fresh_test_dir("recurrent_model", "layout") + ".keras";
  std::filesystem::remove(path);
  save_model(*model, path);
  const auto entries = io::decode_zip(io::read_file(path), path);
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  std::map<std::string, json> by_name;
  for (const auto& l : config["config"]["layers"]) by_name.emplace(l["config"]["name"].get<std::string>(), l);
  const json& lstm = by_name.at("lstm")["config"];
  EXPECT_EQ(by_name.at("lstm")["class_name"], "LSTM");
  EXPECT_EQ(lstm["unit_forget_bias"], false);
  EXPECT_EQ(lstm["recurrent_initializer"]["class_name"], "Orthogonal");
  EXPECT_EQ(lstm["recurrent_initializer"]["config"]["gain"], 1.0);
  EXPECT_EQ(lstm["stateful"], false);
  EXPECT_EQ(lstm["dropout"], 0.0);
  EXPECT_EQ(by_name.at("gru")["config"]["reset_after"], false);
  EXPECT_EQ(by_name.at("gru")["config"]["go_backwards"], true);
  EXPECT_NEAR(by_name.at("gru")["config"]["recurrent_dropout"].get<double>(), 0.2, 1e-7);
  const io::H5Content h5 = io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, "h5", {});
  const std::map<std::string, Shape> want = {{"layers/simple_rnn/cell/vars/0", {4, 5}},
                                             {"layers/simple_rnn/cell/vars/1", {5, 5}},
                                             {"layers/gru/cell/vars/2", {12}},
                                             {"layers/gru_1/cell/vars/2", {2, 9}},
                                             {"layers/lstm/cell/vars/1", {4, 16}}};
  for (const auto& [p, shape] : want) {
    const Tensor* t = h5.find_dataset(p);
    ASSERT_NE(t, nullptr) << p;
    EXPECT_EQ(t->shape(), shape) << p;
  }
}

TEST(RecurrentModel, AKerasFileAskingForAnOptionLockstepDoesNotRunIsRefusedNamingIt) {
  auto model = stacked_model();
  const std::string path = test::fresh_test_dir("recurrent_model", "refused") + ".keras";
  std::filesystem::remove(path);
  save_model(*model, path);
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"stateful", true}, {"unroll", true}}) {
    auto entries = io::decode_zip(io::read_file(path), path);
    std::vector<io::ZipEntry> out;
    for (auto& e : entries) {
      if (e.name == "config.json") {
        json c = json::parse(e.bytes);
        for (auto& l : c["config"]["layers"])
          if (l["class_name"] == "LSTM") l["config"][key] = value;
        e.bytes = c.dump();
      }
      out.push_back(e);
    }
    const std::string bad = path + "." + key + ".keras";
    io::write_file_atomic(bad, io::encode_zip(out));
    const std::string msg = test::io_message_of([&] { (void)load_model(bad); });
    EXPECT_NE(msg.find("argument " + key + "="), std::string::npos) << msg;
    EXPECT_NE(msg.find("lstm"), std::string::npos) << msg;
  }
}

// Keras' most common text model: Embedding(mask_zero=True) -> Bidirectional(LSTM) -> Dense.
std::unique_ptr<Sequential> bidirectional_classifier() {
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{}, "bidirectional_classifier");
  m->set_seed(3);
  for (auto layer : {layers::Input({kSteps}), layers::Embedding(kVocab, 8, true), layers::Bidirectional(layers::LSTM(8)),
                     layers::Dense(1, "sigmoid")})
    m->add(layer);
  m->compile(optimizers::Adam(2e-2), losses::BinaryCrossentropy(), {"accuracy"});
  return m;
}

TEST(RecurrentModel, EmbeddingMaskZeroBidirectionalLstmDenseLearnsWhetherATokenAppears) {
  auto model = bidirectional_classifier();
  const Sequences train = sequences(512, 1), test = sequences(256, 2);
  model->fit(train.x, train.y, {.epochs = 12, .batch_size = 32, .verbose = 0});
  EXPECT_GT(model->evaluate(test.x, test.y, {.batch_size = 128}).at("accuracy"), 0.95);  // chance: 0.5
}

// Bidirectional layers stacked (return_sequences, each merge mode) in a Functional model.
std::unique_ptr<Functional> bidirectional_model() {
  const KerasTensor in = Input({kSteps});
  KerasTensor x = call(layers::Embedding(kVocab, 4, true), in);
  x = call(layers::Bidirectional(layers::GRU(3, true), "sum"), x);
  x = call(layers::Bidirectional(layers::SimpleRNN({.units = 3, .return_sequences = true}), "mul"), x);
  x = call(layers::Bidirectional(layers::LSTM(4), "concat",
                                 layers::LSTM({.units = 4, .activation = "relu", .go_backwards = true})),
           x);
  auto m = std::make_unique<Functional>(in, call(layers::Dense(2, "softmax"), x), "bidirectional", 5);
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

TEST(RecurrentModel, BidirectionalSavesAndLoadsInBothFormats) {
  auto model = bidirectional_model();
  const Sequences data = sequences(32, 3);
  Tensor labels = cast(data.y.reshape({32}), DType::kI64);
  model->fit(data.x, labels, {.epochs = 1, .batch_size = 8, .verbose = 0});
  const std::string dir = test::fresh_test_dir("recurrent_model", "bidirectional");
  save_model(*model, dir + "/saved");
  expect_same_model(*model, *load_model(dir + "/saved"), data.x);
  std::filesystem::remove(dir + ".keras");
  save_model(*model, dir + ".keras");
  expect_same_model(*model, *load_model(dir + ".keras"), data.x);
  // Keras' layout: both layers' configs inside the wrapper's, their weights under their cells.
  const auto entries = io::decode_zip(io::read_file(dir + ".keras"), dir + ".keras");
  const json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  const json& bi = config["config"]["layers"][4];  // after the InputLayer, Embedding and two
  EXPECT_EQ(bi["class_name"], "Bidirectional");
  EXPECT_EQ(bi["config"]["merge_mode"], "concat");
  EXPECT_EQ(bi["config"]["layer"]["class_name"], "LSTM");
  EXPECT_EQ(bi["config"]["layer"]["config"]["name"], "forward_lstm");
  EXPECT_EQ(bi["config"]["layer"]["config"]["kernel_initializer"]["class_name"], "GlorotUniform");
  EXPECT_EQ(bi["config"]["backward_layer"]["config"]["activation"], "relu");
  EXPECT_EQ(bi["config"]["backward_layer"]["config"]["go_backwards"], true);
  const io::H5Content h5 = io::decode_hdf5(io::find_entry(entries, "model.weights.h5")->bytes, "h5", {});
  const std::map<std::string, Shape> want = {{"layers/bidirectional/forward_layer/cell/vars/0", {4, 9}},
                                             {"layers/bidirectional/backward_layer/cell/vars/2", {2, 9}},
                                             {"layers/bidirectional_2/forward_layer/cell/vars/1", {4, 16}},
                                             {"layers/bidirectional_2/backward_layer/cell/vars/0", {3, 16}}};
  for (const auto& [p, shape] : want) {
    const Tensor* t = h5.find_dataset(p);
    ASSERT_NE(t, nullptr) << p;
    EXPECT_EQ(t->shape(), shape) << p;
  }
}

// Under mixed_float16 (float16 compute, float32 variables) the same weights give float32's
// outputs to float16's precision, and the gradients reach the variables as float32.
TEST(RecurrentModel, UnderMixedFloat16ComputesWhatFloat32Does) {
  auto reference = stacked_model();
  std::unique_ptr<Functional> mixed;
  {
    struct Guard {
      Guard() { mixed_precision::set_global_policy("mixed_float16"); }
      ~Guard() { mixed_precision::set_global_policy("float32"); }
    } guard;
    mixed = stacked_model();
  }
  const Sequences data = sequences(8, 4);
  const Tensor a = reference->predict(data.x), b = mixed->predict(data.x);
  const auto va = a.to_vector<float>(), vb = b.to_vector<float>();
  for (std::size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-2) << i;
  GradientTape tape;
  const Model::Output o = mixed->forward(data.x, {.training = true, .seed = 1});
  const auto grads = tape.gradient(mean(o.output), mixed->trainable_variables());
  for (const auto& g : grads) {
    ASSERT_TRUE(g.defined());
    EXPECT_EQ(g.dtype(), DType::kF32);
  }
}

// Bidirectional under mixed_float16: its layers compute in float16 (the wrapper's policy) from
// float32 weights, and give float32's outputs to float16's precision.
TEST(RecurrentModel, BidirectionalUnderMixedFloat16ComputesWhatFloat32Does) {
  auto reference = bidirectional_model();
  std::unique_ptr<Functional> mixed;
  {
    struct Guard {
      Guard() { mixed_precision::set_global_policy("mixed_float16"); }
      ~Guard() { mixed_precision::set_global_policy("float32"); }
    } guard;
    mixed = bidirectional_model();
  }
  for (const auto& v : mixed->variables()) EXPECT_EQ(v.read_value().dtype(), DType::kF32) << v.name();
  int wrappers = 0;
  for (const auto& l : mixed->layers())
    if (const auto* b = dynamic_cast<const layers::BidirectionalLayer*>(l.get())) {
      ++wrappers;
      EXPECT_EQ(b->forward_layer().compute_dtype(), DType::kF16) << l->name();
      EXPECT_EQ(b->backward_layer().compute_dtype(), DType::kF16) << l->name();
    }
  EXPECT_EQ(wrappers, 3);
  const Sequences data = sequences(8, 4);
  const auto va = reference->predict(data.x).to_vector<float>(), vb = mixed->predict(data.x).to_vector<float>();
  ASSERT_EQ(va.size(), vb.size());
  for (std::size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(va[i], vb[i], 1e-2) << i;
}

}  // namespace
}  // namespace lockstep
