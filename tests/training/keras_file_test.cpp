// Keras 3 files (.keras archives, .weights.h5): lockstep's own round trips are bit-exact, the
// files have Keras' layout, and every way a file can be wrong is an IOError naming the file, the
// layer and the problem, with nothing half-loaded and nothing half-written.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::expect_same_variables;
using test::inputs;
using test::io_message_of;
using test::labels;
using test::same_bits;

std::string fresh_dir(const std::string& name) {
  const std::string d = test::fresh_test_dir("keras_file", name);
  std::filesystem::create_directories(d);
  return d;
}

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

// Every layer class lockstep has, BatchNormalization with moved statistics.
std::unique_ptr<Sequential> convnet() {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{
          layers::Input(Shape{6, 6, 2}), layers::Rescaling(0.5f, 0.25f),
          layers::ZeroPadding2D({layers::Pair{1, 0}, layers::Pair{0, 1}}),
          layers::Conv2D({.filters = 4, .kernel_size = {3, 2}, .strides = {2, 1}, .padding = "same"}),
          layers::BatchNormalization({.momentum = 0.8f, .epsilon = 1e-2f}),
          layers::DepthwiseConv2D({.kernel_size = {2, 2}, .depth_multiplier = 2, .dilation_rate = {1, 2},
                                   .activation = "relu"}),
          layers::AveragePooling2D({2, 1}, layers::Pair{1, 1}, "same"), layers::MaxPooling2D({2, 2}),
          layers::Flatten(), layers::Dropout(0.3f), layers::Reshape(Shape{2, -1}), layers::Activation("tanh"),
          layers::Flatten(), layers::Dense(3, "softmax")},
      "convs");
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const Tensor x = inputs(5, 72).reshape(Shape{5, 6, 6, 2});
  m->train_step(x, labels(5, 3));
  return m;
}

std::unique_ptr<Sequential> mlp() {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 4), layers::BatchNormalization(),
                                    layers::Dense(2, "softmax")},
      "mlp");
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->train_step(inputs(8, 4), labels(8, 2));
  return m;
}

TEST(KerasFile, RoundTripIsBitExact) {
  const std::string dir = fresh_dir("round_trip");
  auto model = convnet();
  const Tensor x = inputs(7, 72).reshape(Shape{7, 6, 6, 2});
  save_model(*model, dir + "/m.keras");
  auto loaded = load_model(dir + "/m.keras");
  EXPECT_EQ(loaded->name(), "convs");
  ASSERT_EQ(loaded->layers().size(), model->layers().size());
  for (std::size_t i = 0; i < model->layers().size(); ++i) {
    EXPECT_EQ(loaded->layers()[i]->class_name(), model->layers()[i]->class_name());
    EXPECT_EQ(loaded->layers()[i]->name(), model->layers()[i]->name());
  }
  const auto& bn = dynamic_cast<const layers::BatchNormalizationLayer&>(*loaded->layers()[4]);
  EXPECT_EQ(bn.options().momentum, 0.8f);
  EXPECT_EQ(bn.options().epsilon, 1e-2f);
  const auto& conv = dynamic_cast<const layers::Conv2DLayer&>(*loaded->layers()[3]);
  EXPECT_EQ(conv.options().strides, (layers::Pair{2, 1}));
  EXPECT_EQ(conv.options().padding, "same");
  expect_same_variables(*model, *loaded);
  EXPECT_TRUE(same_bits(model->predict(x), loaded->predict(x)));
  // The compile config came back, and the optimizer's state with it (keras_optimizer_file_test).
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->name(), "Adam");
  EXPECT_EQ(loaded->optimizer()->current_learning_rate(), 1e-2);
  EXPECT_EQ(loaded->optimizer()->hyperparameters(), model->optimizer()->hyperparameters());
  EXPECT_EQ(loaded->optimizer()->iterations(), 1);
  EXPECT_EQ(loaded->loss()->name(), "sparse_categorical_crossentropy");
  ASSERT_EQ(loaded->metrics().size(), 1u);
  EXPECT_EQ(loaded->metrics()[0].metric->name(), "accuracy");
  // Saved again, the archive is the same but for metadata.json's date.
  save_model(*loaded, dir + "/again.keras");
  const auto a = io::decode_zip(io::read_file(dir + "/m.keras"), "m"), b = io::decode_zip(io::read_file(dir + "/again.keras"), "a");
  EXPECT_EQ(io::find_entry(a, "config.json")->bytes, io::find_entry(b, "config.json")->bytes);
}

// The decoder side (Conv2DTranspose with output_padding, UpSampling2D both ways, Cropping2D,
// UpSampling1D, ZeroPadding1D): their configs and weights come back, and the same predictions.
TEST(KerasFile, DecoderLayersRoundTripBitExact) {
  const std::string dir = fresh_dir("decoder");
  using layers::Pair;
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{
          layers::Input(Shape{4, 3, 2}),
          layers::Conv2DTranspose({.filters = 3,
                                   .kernel_size = {3, 2},
                                   .strides = {2, 3},
                                   .padding = "same",
                                   .output_padding = Pair{1, 2},
                                   .activation = "tanh"}),
          layers::UpSampling2D({1, 2}, "bilinear"), layers::Cropping2D({Pair{1, 0}, Pair{2, 3}}),
          layers::UpSampling2D({2, 1}), layers::Reshape(Shape{-1, 3}), layers::UpSampling1D(2),
          layers::ZeroPadding1D({1, 0}), layers::Flatten(), layers::Dense(2)},
      "decoder");
  m->compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  const Tensor x = inputs(5, 24).reshape(Shape{5, 4, 3, 2});
  m->train_step(x, inputs(5, 2));
  save_model(*m, dir + "/m.keras");
  auto loaded = load_model(dir + "/m.keras");
  ASSERT_EQ(loaded->layers().size(), m->layers().size());
  for (std::size_t i = 0; i < m->layers().size(); ++i)
    EXPECT_EQ(loaded->layers()[i]->get_config(), m->layers()[i]->get_config()) << m->layers()[i]->name();
  expect_same_variables(*m, *loaded);
  EXPECT_TRUE(same_bits(m->predict(x), loaded->predict(x)));
}

// The rest of Keras 3's 1D family and the remaining activations: configs, weights (Keras' names and
// order) and predictions come back bit for bit from a .keras file.
TEST(KerasFile, Conv1DFamilyAndRemainingActivationsRoundTripBitExact) {
  const std::string dir = fresh_dir("conv1d_family");
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{
          layers::Input(Shape{6, 2}),
          layers::Conv1DTranspose({.filters = 3, .kernel_size = 3, .strides = 2, .padding = "same",
                                   .output_padding = 1, .activation = "celu"}),
          layers::Cropping1D({2, 1}),
          layers::SeparableConv1D({.filters = 4, .kernel_size = 2, .strides = 2, .depth_multiplier = 2,
                                   .activation = "squareplus"}),
          layers::DepthwiseConv1D({.kernel_size = 2, .padding = "same", .depth_multiplier = 2, .activation = "tanh_shrink"}),
          layers::Flatten(), layers::Dense(4, "log_sigmoid"), layers::Dense(4, "sparse_plus"),
          layers::Dense(3, "soft_shrink"), layers::Dense(2, "hard_tanh")},
      "conv1d_family");
  m->compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  const Tensor x = inputs(5, 12).reshape(Shape{5, 6, 2});
  m->train_step(x, inputs(5, 2));
  save_model(*m, dir + "/m.keras");
  auto loaded = load_model(dir + "/m.keras");
  ASSERT_EQ(loaded->layers().size(), m->layers().size());
  for (std::size_t i = 0; i < m->layers().size(); ++i)
    EXPECT_EQ(loaded->layers()[i]->get_config(), m->layers()[i]->get_config()) << m->layers()[i]->name();
  expect_same_variables(*m, *loaded);
  EXPECT_TRUE(same_bits(m->predict(x), loaded->predict(x)));
  // Keras' config: a 1D size is a list of one, data_format channels_last.
  const json config = json::parse(io::find_entry(io::decode_zip(io::read_file(dir + "/m.keras"), "m"), "config.json")->bytes);
  const json& transpose = config.at("config").at("layers").at(1);
  EXPECT_EQ(transpose.at("class_name"), "Conv1DTranspose");
  EXPECT_EQ(transpose.at("config").at("kernel_size"), json::array({3}));
  EXPECT_EQ(transpose.at("config").at("output_padding"), json::array({1}));
  EXPECT_EQ(transpose.at("config").at("data_format"), "channels_last");
}

TEST(KerasFile, LearningRateScheduleRoundTrips) {
  const std::string dir = fresh_dir("schedule");
  namespace sch = optimizers::schedules;
  const std::vector<optimizers::Schedule> all = {sch::ExponentialDecay(0.1, 7, 0.5),
                                                 sch::PiecewiseConstantDecay({3, 5}, {1.0, 0.5, 0.1}),
                                                 sch::CosineDecay(0.2, 40, {.alpha = 0.1, .warmup_target = 1.0, .warmup_steps = 3}),
                                                 sch::PolynomialDecay(0.1, 10, 0.01, 2.0)};
  for (const auto& schedule : all) {
    auto model = mlp();
    optimizers::AdamOptions o;
    o.schedule = schedule;
    model->compile(optimizers::Adam(o), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    save_model(*model, dir + "/m.keras");
    const json config = json::parse(io::find_entry(io::decode_zip(io::read_file(dir + "/m.keras"), "m"), "config.json")->bytes);
    EXPECT_EQ(config["compile_config"]["optimizer"]["config"]["learning_rate"]["module"], "keras.optimizers.schedules");
    ::testing::internal::CaptureStderr();
    auto loaded = load_model(dir + "/m.keras");
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // no "loaded uncompiled"
    ASSERT_TRUE(loaded->compiled());
    for (std::int64_t step : {0, 1, 3, 4, 6, 10, 25, 50, 1000})
      EXPECT_EQ(loaded->optimizer()->learning_rate_at(step), schedule(step)) << config.dump() << " at step " << step;
  }
}

TEST(KerasFile, KerasWrittenScheduleIsReadAndAnUnknownOneWarnsOnce) {
  const std::string dir = fresh_dir("keras_schedule");
  auto model = mlp();
  save_model(*model, dir + "/m.keras");
  auto entries = io::decode_zip(io::read_file(dir + "/m.keras"), "m");
  json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  // As Keras 3 writes keras.optimizers.SGD(PiecewiseConstantDecay([3, 5], [1.0, 0.5, 0.1])).
  json& lr = config["compile_config"]["optimizer"]["config"]["learning_rate"];
  lr = json::parse(R"({"module": "keras.optimizers.schedules", "class_name": "PiecewiseConstantDecay",
      "config": {"boundaries": [3, 5], "values": [1.0, 0.5, 0.1], "name": "PiecewiseConstant"},
      "registered_name": null})");
  const auto write = [&](const std::string& name) {
    for (auto& e : entries)
      if (e.name == "config.json") e.bytes = config.dump();
    io::write_file_atomic(dir + "/" + name, io::encode_zip(entries));
    return dir + "/" + name;
  };
  auto loaded = load_model(write("piecewise.keras"));
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->learning_rate_at(3), 1.0);
  EXPECT_EQ(loaded->optimizer()->learning_rate_at(4), 0.5);
  EXPECT_EQ(loaded->optimizer()->learning_rate_at(6), 0.1);
  lr["class_name"] = "InverseTimeDecay";
  ::testing::internal::CaptureStderr();
  auto uncompiled = load_model(write("inverse_time.keras"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(uncompiled->compiled());
  EXPECT_HAS(err, "loaded uncompiled: learning-rate schedule InverseTimeDecay is not supported");
  EXPECT_EQ(err.find("WARNING"), err.rfind("WARNING")) << err;  // once
}

// Keras 3 writes the compile_config of a model it never compiled as {} (or null): such a file
// loads uncompiled, silently, as in Keras (it warned "optimizer null is not supported").
TEST(KerasFile, AnUncompiledKerasModelsEmptyCompileConfigLoadsUncompiledSilently) {
  const std::string dir = fresh_dir("keras_uncompiled");
  auto model = mlp();
  save_model(*model, dir + "/m.keras");
  auto entries = io::decode_zip(io::read_file(dir + "/m.keras"), "m");
  json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  for (const json& empty : {json::object(), json()}) {
    config["compile_config"] = empty;
    for (auto& e : entries)
      if (e.name == "config.json") e.bytes = config.dump();
    io::write_file_atomic(dir + "/uncompiled.keras", io::encode_zip(entries));
    ::testing::internal::CaptureStderr();
    auto loaded = load_model(dir + "/uncompiled.keras");
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << empty.dump();
    EXPECT_FALSE(loaded->compiled()) << empty.dump();
  }
}

// Metrics a name does not make (TopKCategoricalAccuracy(k=3), a threshold, a name of one's own) are
// written as Keras' objects and come back as they were; names stay names (Keras keeps
// metrics=["accuracy"] as given). A Keras file listing metric objects loads them; one it cannot
// make loads the model uncompiled, saying why.
TEST(KerasFile, MetricObjectsKeepTheirOptions) {
  const std::string dir = fresh_dir("metric_objects");
  Sequential model({layers::Dense(5, "softmax", 4)}, "top");
  model.compile(optimizers::SGD(0.1), losses::CategoricalCrossentropy(),
                std::vector<metrics::MetricPtr>{metrics::get("accuracy", "categorical_crossentropy"),
                                                std::make_shared<metrics::TopKCategoricalAccuracy>(3),
                                                std::make_shared<metrics::BinaryAccuracy>("bin", 0.7),
                                                metrics::get("sparse_top_k_categorical_accuracy", "")});
  save_model(model, dir + "/m.keras");
  save_model(model, dir + "/folder");
  auto entries = io::decode_zip(io::read_file(dir + "/m.keras"), "m");
  json config = json::parse(io::find_entry(entries, "config.json")->bytes);
  const json& listed = config["compile_config"]["metrics"];
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[0], "accuracy");
  EXPECT_EQ(listed[1]["class_name"], "TopKCategoricalAccuracy");
  EXPECT_EQ(listed[1]["config"], json::parse(R"({"name": "top_k_categorical_accuracy", "dtype": "float32", "k": 3})"));
  EXPECT_EQ(listed[2]["config"]["threshold"], 0.7);
  EXPECT_EQ(listed[3], "sparse_top_k_categorical_accuracy");
  for (const std::string& path : {dir + "/m.keras", dir + "/folder"}) {
    SCOPED_TRACE(path);
    auto loaded = load_model(path);
    ASSERT_EQ(loaded->metrics().size(), 4u);
    EXPECT_EQ(loaded->metrics()[0].metric->class_name(), "CategoricalAccuracy");
    EXPECT_EQ(loaded->metrics()[0].metric->name(), "accuracy");
    const auto* top = dynamic_cast<const metrics::TopKCategoricalAccuracy*>(loaded->metrics()[1].metric.get());
    ASSERT_NE(top, nullptr);
    EXPECT_EQ(top->k(), 3);
    const auto* bin = dynamic_cast<const metrics::BinaryAccuracy*>(loaded->metrics()[2].metric.get());
    ASSERT_NE(bin, nullptr);
    EXPECT_EQ(bin->threshold(), 0.7);
    EXPECT_EQ(bin->name(), "bin");
    EXPECT_EQ(loaded->metrics()[3].metric->name(), "sparse_top_k_categorical_accuracy");
  }
  // Keras' own form: a metric object where lockstep wrote a name, then one lockstep lacks.
  config["compile_config"]["metrics"] = json::parse(
      R"([{"module": "keras.metrics", "class_name": "SparseTopKCategoricalAccuracy",
           "config": {"name": "top2", "dtype": "float32", "k": 2}, "registered_name": null}])");
  for (auto& e : entries)
    if (e.name == "config.json") e.bytes = config.dump();
  io::write_file_atomic(dir + "/keras.keras", io::encode_zip(entries));
  auto loaded = load_model(dir + "/keras.keras");
  ASSERT_EQ(loaded->metrics().size(), 1u);
  EXPECT_EQ(loaded->metrics()[0].metric->name(), "top2");
  EXPECT_EQ(dynamic_cast<const metrics::SparseTopKCategoricalAccuracy&>(*loaded->metrics()[0].metric).k(), 2);
  config["compile_config"]["metrics"][0]["class_name"] = "AUC";
  for (auto& e : entries)
    if (e.name == "config.json") e.bytes = config.dump();
  io::write_file_atomic(dir + "/auc.keras", io::encode_zip(entries));
  ::testing::internal::CaptureStderr();
  loaded = load_model(dir + "/auc.keras");
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(loaded->compiled());
  EXPECT_HAS(warned, "the model is loaded uncompiled: lockstep does not support keras.metrics.AUC yet");
}

TEST(KerasFile, ArchiveHasKerasLayout) {
  const std::string dir = fresh_dir("layout");
  auto model = mlp();
  save_model(*model, dir + "/m.keras");
  const auto entries = io::decode_zip(io::read_file(dir + "/m.keras"), "m.keras");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "metadata.json");
  EXPECT_EQ(entries[1].name, "config.json");
  EXPECT_EQ(entries[2].name, "model.weights.h5");
  const json config = json::parse(entries[1].bytes);
  EXPECT_EQ(config["class_name"], "Sequential");
  const json& list = config["config"]["layers"];
  ASSERT_EQ(list.size(), 4u);
  EXPECT_EQ(list[0]["class_name"], "InputLayer");
  EXPECT_EQ(list[0]["config"]["batch_shape"], json::parse("[null, 4]"));
  EXPECT_EQ(list[1]["config"]["kernel_initializer"]["class_name"], "GlorotUniform");
  EXPECT_EQ(list[1]["config"]["dtype"]["config"]["name"], "float32");
  EXPECT_EQ(list[2]["class_name"], "BatchNormalization");
  EXPECT_EQ(config["compile_config"]["optimizer"]["class_name"], "SGD");
  EXPECT_EQ(config["compile_config"]["loss"], "sparse_categorical_crossentropy");

  const io::H5Content h5 = io::decode_hdf5(entries[2].bytes, "model.weights.h5", {.attributes = true});
  // Keras' order: Dense kernel, bias; BatchNormalization gamma, beta, moving_mean, moving_variance.
  const auto bn = model->layers()[1]->variables();
  for (std::size_t i = 0; i < 4; ++i) {
    const Tensor* t = h5.find_dataset("layers/batch_normalization/vars/" + std::to_string(i));
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(same_bits(*t, bn[i].read_value())) << bn[i].name();
  }
  EXPECT_EQ(bn[2].name(), "batch_normalization/moving_mean");
  ASSERT_NE(h5.find_group("layers/dense/vars"), nullptr);
  EXPECT_EQ(h5.find_group("layers/dense/vars")->attributes.at("name"), "dense");
  EXPECT_NE(h5.find_group("vars"), nullptr);
}

TEST(KerasFile, WeightsFileRoundTripAndMismatch) {
  const std::string dir = fresh_dir("weights");
  auto model = mlp();
  save_weights(*model, dir + "/m.weights.h5");
  auto other = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 4), layers::BatchNormalization(),
                                    layers::Dense(2, "softmax")},
      "mlp");
  load_weights(*other, dir + "/m.weights.h5");
  expect_same_variables(*model, *other);
  const Tensor x = inputs(5, 4);
  EXPECT_TRUE(same_bits(model->predict(x), other->predict(x)));

  Sequential wider({layers::Dense(9, "relu", 4), layers::BatchNormalization(), layers::Dense(2, "softmax")}, "mlp");
  const auto before = wider.variables()[0].read_value();
  const std::string m = io_message_of([&] { load_weights(wider, dir + "/m.weights.h5"); });
  EXPECT_HAS(m, "m.weights.h5");
  EXPECT_HAS(m, "weight layers/dense/vars/0");
  EXPECT_HAS(m, "has shape (4, 8) but the model's is (4, 9)");
  EXPECT_TRUE(same_bits(before, wider.variables()[0].read_value())) << "nothing half-loaded";
  EXPECT_THROW(save_weights(*model, dir + "/m.h5"), ValueError);
}

TEST(KerasFile, PolicyAndLogitsLossRoundTrip) {
  const std::string dir = fresh_dir("policy");
  Sequential model({layers::Dense({.units = 4, .activation = "relu", .input_dim = 3, .dtype = "mixed_bfloat16"}),
                    layers::Dense(2)},
                   "mixed");
  model.compile(optimizers::AdamW({}), losses::SparseCategoricalCrossentropy({.from_logits = true}),
                {"sparse_categorical_accuracy"});
  save_model(model, dir + "/m.keras");
  auto loaded = load_model(dir + "/m.keras");
  EXPECT_EQ(loaded->layers()[1]->dtype_policy().name(), "mixed_bfloat16");
  EXPECT_EQ(loaded->layers()[2]->dtype_policy().name(), "float32");
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->name(), "AdamW");
  EXPECT_EQ(loaded->optimizer()->hyperparameters(), model.optimizer()->hyperparameters());
  EXPECT_TRUE(loaded->loss()->from_logits());
  EXPECT_EQ(loaded->metrics()[0].metric->name(), "sparse_categorical_accuracy");
  const Tensor x = inputs(6, 3);
  EXPECT_TRUE(same_bits(model.predict(x), loaded->predict(x)));
}

// Keras finds a layer's weights by class and position, not by name (names are often generated).
TEST(KerasFile, WeightGroupsAreNamedByClassAndPosition) {
  const std::string dir = fresh_dir("group_names");
  Sequential model({layers::Dense({.units = 3, .input_dim = 2, .name = "hidden"}), layers::Dropout(0.1f),
                    layers::Dense({.units = 2, .name = "out"})},
                   "named");
  save_weights(model, dir + "/w.weights.h5");
  const io::H5Content h5 = io::decode_hdf5(io::read_file(dir + "/w.weights.h5"), "w", {.attributes = true});
  ASSERT_NE(h5.find_group("layers/dense_1/vars"), nullptr);
  EXPECT_EQ(h5.find_group("layers/dense/vars")->attributes.at("name"), "hidden");
  EXPECT_EQ(h5.find_group("layers/dense_1/vars")->attributes.at("name"), "out");
  EXPECT_TRUE(same_bits(*h5.find_dataset("layers/dense_1/vars/0"), model.layers()[2]->variables()[0].read_value()));
  // The same architecture under other names takes the weights.
  Sequential other({layers::Dense(3, "linear", 2), layers::Dropout(0.1f), layers::Dense(2)}, "other");
  load_weights(other, dir + "/w.weights.h5");
  const Tensor x = inputs(4, 2);
  EXPECT_TRUE(same_bits(model.predict(x), other.predict(x)));
}

// A good archive of mlp(), with one entry replaced.
class BrokenArchive : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    save_model(*mlp(), dir_ + "/good.keras");
    entries_ = io::decode_zip(io::read_file(dir_ + "/good.keras"), "good.keras");
    config_ = json::parse(io::find_entry(entries_, "config.json")->bytes);
    h5_ = io::decode_hdf5(io::find_entry(entries_, "model.weights.h5")->bytes, "w", {.attributes = true});
  }
  // Writes the archive with config_ and h5_ as they are now; returns load_model's message.
  std::string load_message(const std::string& name) {
    auto copy = entries_;
    for (auto& e : copy) {
      if (e.name == "config.json") e.bytes = config_.dump();
      if (e.name == "model.weights.h5") e.bytes = io::encode_hdf5(h5_);
    }
    const std::string path = dir_ + "/" + name;
    io::write_file_atomic(path, io::encode_zip(copy));
    std::string m = io_message_of([&] { load_model(path); });
    EXPECT_HAS(m, name);
    return m;
  }
  // Writes the archive with config_ as it is now and loads it into `model`; returns the warnings.
  std::string load_warnings(const std::string& name, std::unique_ptr<Model>& model) {
    auto copy = entries_;
    for (auto& e : copy)
      if (e.name == "config.json") e.bytes = config_.dump();
    io::write_file_atomic(dir_ + "/" + name, io::encode_zip(copy));
    ::testing::internal::CaptureStderr();
    model = load_model(dir_ + "/" + name);
    return ::testing::internal::GetCapturedStderr();
  }
  json& layer(std::size_t i) { return config_["config"]["layers"][i]; }
  std::string dir_;
  std::vector<io::ZipEntry> entries_;
  json config_;
  io::H5Content h5_;
};

TEST_F(BrokenArchive, UnsupportedLayerNamesFileLayerAndClass) {
  layer(2) = {{"module", "keras.layers"}, {"class_name", "Conv3D"}, {"config", {{"name", "conv3d"}, {"filters", 4}}}};
  const std::string m = load_message("conv3d.keras");
  EXPECT_HAS(m, "layer 'conv3d' (Conv3D): this layer class is not supported by lockstep");
  EXPECT_HAS(m, "BatchNormalization");  // the classes it has
}

TEST_F(BrokenArchive, SubclassedModelIsNamed) {
  config_["class_name"] = "MyModel";
  EXPECT_HAS(load_message("subclass.keras"),
             "the model is a MyModel model; lockstep reads Sequential and Functional models only");
}

TEST_F(BrokenArchive, UnsupportedArgumentIsNamed) {
  layer(1)["config"]["kernel_regularizer"] = {{"class_name", "L2"}, {"config", {{"l2", 0.01}}}};
  EXPECT_HAS(load_message("regularizer.keras"), "layer 'dense' (Dense): argument kernel_regularizer=");
  layer(1)["config"].erase("kernel_regularizer");
  layer(1)["config"]["data_format"] = "channels_first";
  EXPECT_HAS(load_message("data_format.keras"), "layer 'dense' (Dense): argument data_format=\"channels_first\"");
  layer(1)["config"].erase("data_format");
  layer(2)["config"]["renorm"] = true;
  EXPECT_HAS(load_message("renorm.keras"), "layer 'batch_normalization' (BatchNormalization): argument renorm=true");
  layer(2)["config"]["renorm"] = false;
  layer(1)["config"]["kernel_initializer"] = {{"class_name", "LecunNormal"}, {"config", json::object()}};
  EXPECT_HAS(load_message("initializer.keras"), "argument kernel_initializer=");
  layer(1)["config"]["kernel_initializer"] = "glorot_uniform";
  layer(1)["config"]["dtype"] = "float64";
  EXPECT_HAS(load_message("dtype.keras"), "layer 'dense' (Dense): unknown dtype policy 'float64'");
  layer(1)["config"]["dtype"] = "float32";
  layer(1)["config"]["activation"] = "swishy";
  EXPECT_HAS(load_message("activation.keras"), "layer 'dense' (Dense): unknown activation 'swishy'");
  layer(1)["config"]["activation"] = "relu";
  layer(1)["config"].erase("units");
  EXPECT_HAS(load_message("units.keras"), "layer 'dense' (Dense): Dense: missing argument units");
  layer(1)["config"]["units"] = "64";
  EXPECT_HAS(load_message("units.keras"), "layer 'dense' (Dense): Dense: argument units=\"64\" must be an integer");
}

TEST_F(BrokenArchive, MissingWeightIsNamed) {
  std::erase_if(h5_.datasets, [](const io::H5Dataset& d) { return d.path == "layers/dense_1/vars/1"; });
  EXPECT_HAS(load_message("missing.keras"),
             "model.weights.h5 has no weight layers/dense_1/vars/1 (layer 'dense_1' (Dense) variable 'dense_1/bias'");
}

TEST_F(BrokenArchive, MissingLayerGroupIsNamed) {
  std::erase_if(h5_.datasets, [](const io::H5Dataset& d) { return d.path.rfind("layers/batch_normalization/", 0) == 0; });
  std::erase_if(h5_.groups, [](const io::H5Group& g) { return g.path == "layers/batch_normalization/vars"; });
  EXPECT_HAS(load_message("no_group.keras"), "has no group layers/batch_normalization/vars");
}

TEST_F(BrokenArchive, WrongShapeAndExtraWeightsAreNamed) {
  for (auto& d : h5_.datasets)
    if (d.path == "layers/dense/vars/0") d.value = Tensor::zeros(Shape{8, 4});
  EXPECT_HAS(load_message("shape.keras"), "weight layers/dense/vars/0 (layer 'dense' (Dense) variable 'dense/kernel') "
                                          "has shape (8, 4) but the model's is (4, 8)");
  for (auto& d : h5_.datasets)
    if (d.path == "layers/dense/vars/0") d.value = Tensor::zeros(Shape{4, 8});
  h5_.datasets.push_back({"layers/dense/vars/2", Tensor::zeros(Shape{8})});
  EXPECT_HAS(load_message("extra.keras"), "holds layers/dense/vars/2, but layer 'dense' (Dense) has 2 weights");
  h5_.datasets.pop_back();
  h5_.datasets.push_back({"layers/conv3d/vars/0", Tensor::zeros(Shape{8})});
  EXPECT_HAS(load_message("other_layer.keras"), "holds layers/conv3d/vars/0, but model 'mlp' has no layer whose weights go to layers/conv3d/vars");
}

TEST_F(BrokenArchive, UnknownCompileConfigLoadsUncompiled) {
  config_["compile_config"]["optimizer"] = {{"class_name", "Adagrad"}, {"config", {{"learning_rate", 0.001}}}};
  std::unique_ptr<Model> m;
  const std::string err = load_warnings("adagrad.keras", m);
  EXPECT_FALSE(m->compiled());
  EXPECT_HAS(err, "WARNING: Keras file '");
  EXPECT_HAS(err, "optimizer Adagrad is not supported");
  EXPECT_TRUE(same_bits(m->predict(inputs(3, 4)), mlp()->predict(inputs(3, 4))));
}

// An optimizer option lockstep does not read (Keras' Adam with amsgrad on) is named and the model
// loads uncompiled, as for an unknown class: optimizers::deserialize, the one owner of the options,
// refuses it.
TEST_F(BrokenArchive, AnOptimizerOptionLockstepLacksLoadsUncompiledNamingIt) {
  config_["compile_config"]["optimizer"] = {{"class_name", "Adam"},
                                            {"config", {{"learning_rate", 0.001}, {"amsgrad", true}}}};
  std::unique_ptr<Model> m;
  EXPECT_HAS(load_warnings("amsgrad.keras", m),
             "the model is loaded uncompiled: optimizer Adam: argument amsgrad=true is not supported");
  EXPECT_FALSE(m->compiled());
  config_["compile_config"]["optimizer"]["config"]["amsgrad"] = false;  // Keras' "off"
  EXPECT_EQ(load_warnings("amsgrad_off.keras", m), "");
  EXPECT_TRUE(m->compiled());
}

// A loss object's options go through the reader optimizers and metrics use: Keras' values at
// lockstep's only ones pass, another is named in the same form, and the model loads uncompiled.
TEST_F(BrokenArchive, ALossOptionLockstepLacksLoadsUncompiledNamingIt) {
  config_["compile_config"]["loss"] = json::parse(R"({"module": "keras.losses", "class_name": "SparseCategoricalCrossentropy",
      "config": {"name": "sparse_categorical_crossentropy", "reduction": "sum_over_batch_size", "from_logits": false,
                 "ignore_class": null}, "registered_name": null})");
  std::unique_ptr<Model> m;
  EXPECT_EQ(load_warnings("loss_off.keras", m), "");
  EXPECT_TRUE(m->compiled());
  config_["compile_config"]["loss"]["config"]["ignore_class"] = 0;
  EXPECT_HAS(load_warnings("loss_ignore.keras", m),
             "the model is loaded uncompiled: loss SparseCategoricalCrossentropy: argument ignore_class=0 is not supported");
  EXPECT_FALSE(m->compiled());
  config_["compile_config"]["loss"]["config"]["ignore_class"] = nullptr;
  config_["compile_config"]["loss"]["config"]["from_logits"] = "yes";
  EXPECT_HAS(load_warnings("loss_logits.keras", m), "argument from_logits=\"yes\" must be true or false");
}

// RMSprop's compile config as Keras 3 writes and reads it: lockstep's is Keras' object (its
// arguments, centered a boolean, name "rmsprop") and loads back the same rule; Keras' own, every
// argument written (Keras' "off" for those lockstep lacks), and the bare name "rmsprop" (compile()
// without an optimizer) load as Keras' defaults; a weight_decay is refused by name.
TEST_F(BrokenArchive, RMSpropCompileConfigIsKeras3sBothWays) {
  optimizers::RMSpropOptions o;
  o.learning_rate = 0.01;
  o.rho = 0.8;
  o.momentum = 0.5;
  o.centered = true;
  auto model = mlp();
  model->compile(optimizers::RMSprop(o), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  model->train_step(inputs(8, 4), labels(8, 2));
  save_model(*model, dir_ + "/rmsprop.keras");
  const json written =
      json::parse(io::find_entry(io::decode_zip(io::read_file(dir_ + "/rmsprop.keras"), "r"), "config.json")->bytes);
  const json& opt = written["compile_config"]["optimizer"];
  EXPECT_EQ(opt["module"], "keras.optimizers");
  EXPECT_EQ(opt["class_name"], "RMSprop");
  EXPECT_EQ(opt["config"]["name"], "rmsprop");
  EXPECT_EQ(opt["config"]["rho"], 0.8);
  EXPECT_EQ(opt["config"]["momentum"], 0.5);
  EXPECT_EQ(opt["config"]["epsilon"], 1e-7);
  EXPECT_EQ(opt["config"]["centered"], true);
  auto loaded = load_model(dir_ + "/rmsprop.keras");
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->name(), "RMSprop");
  EXPECT_EQ(loaded->optimizer()->current_learning_rate(), 0.01);
  EXPECT_EQ(loaded->optimizer()->hyperparameters(), model->optimizer()->hyperparameters());

  const std::map<std::string, double> defaults{{"rho", 0.9}, {"momentum", 0.0}, {"epsilon", 1e-7}, {"centered", 0.0}};
  config_["compile_config"]["optimizer"] = json::parse(R"({"module": "keras.optimizers", "class_name": "RMSprop",
      "config": {"name": "rmsprop", "learning_rate": 0.0010000000474974513, "weight_decay": null, "clipnorm": null,
                 "global_clipnorm": null, "clipvalue": null, "use_ema": false, "ema_momentum": 0.99,
                 "ema_overwrite_frequency": null, "loss_scale_factor": null, "gradient_accumulation_steps": null,
                 "rho": 0.9, "momentum": 0.0, "epsilon": 1e-07, "centered": false},
      "registered_name": null})");
  std::unique_ptr<Model> m;
  EXPECT_EQ(load_warnings("keras_rmsprop.keras", m), "");
  ASSERT_TRUE(m->compiled());
  EXPECT_EQ(m->optimizer()->name(), "RMSprop");
  EXPECT_EQ(m->optimizer()->hyperparameters(), defaults);
  config_["compile_config"]["optimizer"] = "rmsprop";
  EXPECT_EQ(load_warnings("rmsprop_by_name.keras", m), "");
  ASSERT_TRUE(m->compiled());
  EXPECT_EQ(m->optimizer()->name(), "RMSprop");
  EXPECT_EQ(m->optimizer()->current_learning_rate(), 0.001);
  EXPECT_EQ(m->optimizer()->hyperparameters(), defaults);
  config_["compile_config"]["optimizer"] = {{"class_name", "RMSprop"},
                                            {"config", {{"learning_rate", 0.001}, {"weight_decay", 0.01}}}};
  EXPECT_HAS(load_warnings("rmsprop_decay.keras", m), "optimizer RMSprop: argument weight_decay=");
  EXPECT_FALSE(m->compiled());
}

TEST_F(BrokenArchive, StepsPerExecutionRoundTripsAndABadOneIsNamed) {
  EXPECT_EQ(config_["compile_config"]["steps_per_execution"], 1);
  auto model = mlp();
  model->set_steps_per_execution(4);
  save_model(*model, dir_ + "/four.keras");
  EXPECT_EQ(load_model(dir_ + "/four.keras")->steps_per_execution(), 4);
  for (const json& bad : {json(0), json(2.5), json("4")}) {
    config_["compile_config"]["steps_per_execution"] = bad;
    std::unique_ptr<Model> m;
    const std::string err = load_warnings("bad.keras", m);
    EXPECT_FALSE(m->compiled()) << bad;
    EXPECT_HAS(err, "compile argument steps_per_execution=" + bad.dump() + " is not a positive integer");
  }
}

TEST_F(BrokenArchive, NotAnArchiveOrCutShortIsNamed) {
  const std::string good = io::read_file(dir_ + "/good.keras");
  io::write_file_atomic(dir_ + "/cut.keras", good.substr(0, good.size() - 100));
  EXPECT_HAS(io_message_of([&] { load_model(dir_ + "/cut.keras"); }), "cut.keras': truncated");
  io::write_file_atomic(dir_ + "/text.keras", "{\"class_name\": \"Sequential\"}");
  EXPECT_HAS(io_message_of([&] { load_model(dir_ + "/text.keras"); }), "text.keras': not a zip archive");
  EXPECT_HAS(io_message_of([&] { load_model(dir_ + "/absent.keras"); }), "absent.keras");
  io::write_file_atomic(dir_ + "/no_config.keras", io::encode_zip({entries_[0], entries_[2]}));
  EXPECT_HAS(io_message_of([&] { load_model(dir_ + "/no_config.keras"); }), "no_config.keras' has no config.json");
  auto copy = entries_;
  copy[1].bytes = "{\"class_name\": ";
  io::write_file_atomic(dir_ + "/bad_json.keras", io::encode_zip(copy));
  EXPECT_HAS(io_message_of([&] { load_model(dir_ + "/bad_json.keras"); }), "bad_json.keras': config.json is not valid JSON");
  copy = entries_;
  copy[2].bytes = copy[2].bytes.substr(0, copy[2].bytes.size() / 2);
  io::write_file_atomic(dir_ + "/cut_h5.keras", io::encode_zip(copy));
  EXPECT_HAS(io_message_of([&] { load_model(dir_ + "/cut_h5.keras"); }), "cut_h5.keras': model.weights.h5: cannot be opened");
}

TEST(KerasFile, FailedSaveLeavesThePreviousFile) {
  const std::string dir = fresh_dir("failed_save");
  auto model = mlp();
  save_model(*model, dir + "/m.keras");
  const std::string before = io::read_file(dir + "/m.keras");
  Sequential unbuilt({layers::Dense(3)}, "unbuilt");
  EXPECT_THROW(save_model(unbuilt, dir + "/m.keras"), ValueError);
  EXPECT_EQ(io::read_file(dir + "/m.keras"), before);
  EXPECT_THROW(save_model(*model, dir + "/no-such-dir/m.keras"), IOError);
  EXPECT_FALSE(std::filesystem::exists(dir + "/no-such-dir"));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename(), "m.keras") << "a temporary file was left: " << e.path();
}

}  // namespace
}  // namespace lockstep
