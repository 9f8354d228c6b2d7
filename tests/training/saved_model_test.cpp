// Saved models: round trips that must be bit-exact (predictions, and training after the load),
// and every way a saved folder can be wrong, each reported naming the file.
#include "lockstep/training/saved_model.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/layers/sequence_layers.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using test::expect_same_variables;
using test::inputs;
using test::io_message_of;
using test::labels;
using test::same_bits;

std::string fresh_dir(const std::string& name) { return test::fresh_test_dir("saved_model", name); }

std::unique_ptr<Sequential> flagship(std::uint64_t seed) {
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{}, "flagship");
  m->set_seed(seed);
  m->add(layers::Dense(128, "relu", 784));
  m->add(layers::Dropout(0.2f));
  m->add(layers::Dense(10, "softmax"));
  m->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

void replace_in_file(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = io::read_file(path);
  const auto at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  s.replace(at, from.size(), to);
  io::write_file_atomic(path, s);
}

TEST(SavedModel, FlagshipRoundTripIsBitExactAndTrainingContinues) {
  const std::string dir = fresh_dir("flagship");
  auto model = flagship(42);
  const Tensor x = inputs(64, 784), y = labels(64, 10);
  model->fit(x, y, {.epochs = 2, .batch_size = 16, .verbose = 0});
  save_model(*model, dir);
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/weights.safetensors"));

  auto loaded = load_model(dir);
  EXPECT_EQ(loaded->name(), "flagship");
  EXPECT_EQ(loaded->seed(), 42u);
  ASSERT_EQ(loaded->layers().size(), 3u);
  EXPECT_EQ(loaded->layers()[1]->class_name(), "Dropout");
  EXPECT_EQ(loaded->count_params(), model->count_params());
  expect_same_variables(*model, *loaded);
  EXPECT_TRUE(same_bits(model->predict(x), loaded->predict(x)));

  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->name(), "Adam");
  EXPECT_EQ(loaded->optimizer()->current_learning_rate(), 1e-3);
  EXPECT_EQ(loaded->optimizer()->iterations(), model->optimizer()->iterations());
  EXPECT_EQ(loaded->optimizer()->hyperparameters(), model->optimizer()->hyperparameters());
  EXPECT_EQ(loaded->loss()->name(), "sparse_categorical_crossentropy");
  ASSERT_EQ(loaded->metrics().size(), 1u);
  EXPECT_EQ(loaded->metrics()[0].metric->name(), "accuracy");

  // Adam's moments and step, and the dropout stream, came back: the next steps are identical.
  for (int step = 0; step < 3; ++step) EXPECT_EQ(model->train_step(x, y), loaded->train_step(x, y));
  expect_same_variables(*model, *loaded);
  const Logs a = model->evaluate(x, y), b = loaded->evaluate(x, y);
  EXPECT_EQ(a.at("loss"), b.at("loss"));
  EXPECT_EQ(a.at("accuracy"), b.at("accuracy"));
}

TEST(SavedModel, WithoutOptimizerStateKeepsCompileConfigOnly) {
  const std::string dir = fresh_dir("no_optimizer");
  auto model = flagship(1);
  model->fit(inputs(32, 784), labels(32, 10), {.epochs = 1, .batch_size = 16, .verbose = 0});
  save_model(*model, dir, {.include_optimizer = false});
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->iterations(), 0);
  expect_same_variables(*model, *loaded);
}

TEST(SavedModel, ShapeLayersAndOptionsRoundTrip) {
  const std::string dir = fresh_dir("shapes");
  Sequential model(
      {layers::Input(Shape{4, 4}), layers::Flatten(),
       layers::Dense({.units = 8, .activation = "tanh", .kernel_initializer = "he_normal", .name = "hidden"}),
       layers::Reshape(Shape{2, -1}), layers::Activation("sigmoid"), layers::Flatten(),
       layers::Dense({.units = 3, .use_bias = false})},
      "shapes");
  ASSERT_TRUE(model.built());
  const Tensor x = inputs(5, 16).reshape(Shape{5, 4, 4});
  save_model(model, dir);  // not compiled: no compile config
  auto loaded = load_model(dir);
  EXPECT_FALSE(loaded->compiled());
  ASSERT_EQ(loaded->layers().size(), model.layers().size());
  for (std::size_t i = 0; i < model.layers().size(); ++i) {
    EXPECT_EQ(loaded->layers()[i]->class_name(), model.layers()[i]->class_name());
    EXPECT_EQ(loaded->layers()[i]->name(), model.layers()[i]->name());
  }
  const auto& hidden = dynamic_cast<const layers::DenseLayer&>(*loaded->layers()[2]);
  EXPECT_EQ(hidden.name(), "hidden");
  EXPECT_EQ(hidden.options().kernel_initializer, "he_normal");
  EXPECT_FALSE(dynamic_cast<const layers::DenseLayer&>(*loaded->layers()[6]).options().use_bias);
  EXPECT_EQ(dynamic_cast<const layers::ReshapeLayer&>(*loaded->layers()[3]).target_shape(), (Shape{2, -1}));
  EXPECT_EQ(dynamic_cast<const layers::ActivationLayer&>(*loaded->layers()[4]).kind(),
            layers::ActivationKind::kSigmoid);
  EXPECT_EQ(*loaded->layers()[0]->declared_input_shape(), (Shape{4, 4}));
  expect_same_variables(model, *loaded);
  EXPECT_TRUE(same_bits(model(x), (*loaded)(x)));
}

TEST(SavedModel, ConvolutionalLayersAndBatchNormStateRoundTrip) {
  const std::string dir = fresh_dir("conv");
  Sequential model(
      {layers::Input(Shape{6, 6, 2}), layers::Rescaling(0.5f, 0.25f), layers::ZeroPadding2D({layers::Pair{1, 0}, layers::Pair{0, 1}}),
       layers::Conv2D({.filters = 4, .kernel_size = {3, 2}, .strides = {2, 1}, .padding = "same", .use_bias = false}),
       layers::BatchNormalization({.momentum = 0.8f, .epsilon = 1e-2f, .synchronized = true}),
       layers::DepthwiseConv2D({.kernel_size = {2, 2}, .depth_multiplier = 2, .dilation_rate = {1, 2}, .activation = "relu"}),
       layers::AveragePooling2D({2, 1}, layers::Pair{1, 1}, "same"), layers::MaxPooling2D({2, 2}),
       layers::GlobalAveragePooling2D(), layers::Dense(3, "softmax")},
      "convs");
  model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const Tensor x = inputs(5, 72).reshape(Shape{5, 6, 6, 2}), y = labels(5, 3);
  model.train_step(x, y);  // moves the BatchNormalization statistics away from their initial values
  save_model(model, dir);
  auto loaded = load_model(dir);
  ASSERT_EQ(loaded->layers().size(), model.layers().size());
  for (std::size_t i = 0; i < model.layers().size(); ++i)
    EXPECT_EQ(loaded->layers()[i]->class_name(), model.layers()[i]->class_name());
  const auto& bn = dynamic_cast<const layers::BatchNormalizationLayer&>(*loaded->layers()[4]);
  EXPECT_EQ(bn.options().momentum, 0.8f);
  EXPECT_TRUE(bn.options().synchronized);
  const auto& conv = dynamic_cast<const layers::Conv2DLayer&>(*loaded->layers()[3]);
  EXPECT_EQ(conv.options().strides, (layers::Pair{2, 1}));
  EXPECT_EQ(conv.options().padding, "same");
  EXPECT_EQ(dynamic_cast<const layers::DepthwiseConv2DLayer&>(*loaded->layers()[5]).options().dilation_rate,
            (layers::Pair{1, 2}));
  expect_same_variables(model, *loaded);
  EXPECT_TRUE(same_bits(model(x), (*loaded)(x)));
  EXPECT_EQ(model.train_step(x, y), loaded->train_step(x, y));
  expect_same_variables(model, *loaded);
}

// The sequence convnet layers, in lockstep's folder and in a .keras archive (Keras' class names
// and its one-element lists for sizes): the same options, bits and training.
TEST(SavedModel, SequenceConvolutionalLayersRoundTripInBothFormats) {
  const std::string dir = fresh_dir("seqconv");
  Sequential model(
      {layers::Input(Shape{12, 3}),
       layers::Conv1D({.filters = 4, .kernel_size = 3, .padding = "causal", .dilation_rate = 2, .activation = "relu"}),
       layers::MaxPooling1D(2, 1, "same"),
       layers::Conv1D({.filters = 6, .kernel_size = 2, .strides = 2, .padding = "same", .groups = 2, .use_bias = false}),
       layers::AveragePooling1D(2), layers::Reshape(Shape{3, 2, 3}), layers::GlobalMaxPooling2D(true),
       layers::Reshape(Shape{1, 3}), layers::GlobalMaxPooling1D(), layers::Dense(3, "softmax")},
      "seqconv");
  model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const Tensor x = inputs(5, 36).reshape(Shape{5, 12, 3}), y = labels(5, 3);
  model.train_step(x, y);
  for (const std::string& path : {dir, dir + ".keras"}) {
    save_model(model, path);
    auto loaded = load_model(path);
    ASSERT_EQ(loaded->layers().size(), model.layers().size()) << path;
    for (std::size_t i = 0; i < model.layers().size(); ++i)
      EXPECT_EQ(loaded->layers()[i]->class_name(), model.layers()[i]->class_name()) << path;
    const auto& causal = dynamic_cast<const layers::Conv1DLayer&>(*loaded->layers()[1]).options();
    EXPECT_EQ(causal.padding, "causal") << path;
    EXPECT_EQ(causal.dilation_rate, 2) << path;
    const auto& grouped = dynamic_cast<const layers::Conv1DLayer&>(*loaded->layers()[3]).options();
    EXPECT_EQ(grouped.strides, 2) << path;
    EXPECT_EQ(grouped.groups, 2) << path;
    EXPECT_FALSE(grouped.use_bias) << path;
    const auto& pool = dynamic_cast<const layers::Pooling1DLayer&>(*loaded->layers()[2]);
    EXPECT_TRUE(pool.is_max()) << path;
    EXPECT_EQ(pool.strides(), 1) << path;
    EXPECT_EQ(pool.options().padding, "same") << path;
    EXPECT_EQ(dynamic_cast<const layers::Pooling1DLayer&>(*loaded->layers()[4]).strides(), 2) << path;
    EXPECT_TRUE(dynamic_cast<const layers::GlobalPooling2DLayer&>(*loaded->layers()[6]).keepdims()) << path;
    expect_same_variables(model, *loaded);
    EXPECT_TRUE(same_bits(model(x), (*loaded)(x))) << path;
  }
  // The folder keeps the optimizer's state too: the next step trains the same bits.
  auto loaded = load_model(dir);
  EXPECT_EQ(model.train_step(x, y), loaded->train_step(x, y));
  expect_same_variables(model, *loaded);
}

TEST(SavedModel, ModelBuiltLaterAndSgdOptionsRoundTrip) {
  const std::string dir = fresh_dir("sgd");
  Sequential model({layers::Dense(6, "relu"), layers::Dense(2)}, "late");
  model.build(Shape{-1, 3});
  optimizers::SGDOptions o;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  o.clipnorm = 1.5;
  model.compile(optimizers::SGD(o), losses::SparseCategoricalCrossentropy({.from_logits = true}),
                {"sparse_categorical_accuracy"});
  const Tensor x = inputs(8, 3), y = labels(8, 2);
  model.train_step(x, y);
  save_model(model, dir);
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded->compiled());
  EXPECT_EQ(loaded->optimizer()->name(), "SGD");
  EXPECT_EQ(loaded->optimizer()->hyperparameters(), model.optimizer()->hyperparameters());
  EXPECT_EQ(loaded->optimizer()->options().clipnorm, std::optional<double>(1.5));
  EXPECT_TRUE(loaded->loss()->from_logits());
  EXPECT_EQ(loaded->metrics()[0].metric->name(), "sparse_categorical_accuracy");
  EXPECT_EQ(model.train_step(x, y), loaded->train_step(x, y));
  expect_same_variables(model, *loaded);
}

TEST(SavedModel, LearningRateScheduleContinuesFromTheSavedStep) {
  const std::string dir = fresh_dir("schedule");
  auto model = flagship(3);
  optimizers::AdamOptions o;
  o.schedule = optimizers::schedules::ExponentialDecay(0.01, 2, 0.5);
  model->compile(optimizers::Adam(o), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const Tensor x = inputs(32, 784), y = labels(32, 10);
  model->fit(x, y, {.epochs = 1, .batch_size = 8, .verbose = 0});
  save_model(*model, dir);
  auto loaded = load_model(dir);
  EXPECT_EQ(loaded->optimizer()->iterations(), 4);
  for (std::int64_t step : {0, 4, 5, 9})
    EXPECT_EQ(loaded->optimizer()->learning_rate_at(step), model->optimizer()->learning_rate_at(step)) << step;
  EXPECT_EQ(model->train_step(x, y), loaded->train_step(x, y));
  expect_same_variables(*model, *loaded);
}

TEST(SavedModel, SaveRefusesUnbuiltModelsAndUnknownLayersWritingNothing) {
  const std::string dir = fresh_dir("refused");
  Sequential unbuilt({layers::Dense(3)});
  EXPECT_THROW(save_model(unbuilt, dir), ValueError);

  class Custom final : public layers::Layer {
   public:
    Custom() : Layer("custom") {}
    std::string class_name() const override { return "Custom"; }
    Shape compute_output_shape(const Shape& s) const override { return s; }
    Tensor call(const Tensor& x, const layers::CallContext&) const override { return x; }
  };
  Sequential custom({layers::Dense(3, "linear", 2), std::make_shared<Custom>()});
  try {
    save_model(custom, dir);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'custom' is a Custom"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

class SavedModelErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto model = flagship(3);
    save_model(*model, dir_);
    json_ = dir_ + "/model.json";
    weights_ = dir_ + "/weights.safetensors";
  }
  std::string dir_, json_, weights_;
};

TEST_F(SavedModelErrors, MissingFolderOrFile) {
  const std::string missing = dir_ + "-nope";
  auto m = io_message_of([&] { load_model(missing); });
  EXPECT_NE(m.find(missing), std::string::npos) << m;
  EXPECT_NE(m.find("does not exist"), std::string::npos) << m;

  std::filesystem::remove(weights_);
  m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(weights_), std::string::npos) << m;
  std::filesystem::remove(json_);
  m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
}

TEST_F(SavedModelErrors, TruncatedWeights) {
  const std::string bytes = io::read_file(weights_);
  io::write_file_atomic(weights_, bytes.substr(0, bytes.size() / 2));
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(weights_), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
}

TEST_F(SavedModelErrors, CorruptWeights) {
  std::string bytes = io::read_file(weights_);
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x40);
  io::write_file_atomic(weights_, bytes);
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(weights_), std::string::npos) << m;
  EXPECT_NE(m.find("CRC-32C"), std::string::npos) << m;
}

TEST_F(SavedModelErrors, EditedUnitsNameTheMisShapedTensor) {
  replace_in_file(json_, "\"units\": 10", "\"units\": 11");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(weights_), std::string::npos) << m;
  EXPECT_NE(m.find("'dense_1/kernel' is (128, 10)"), std::string::npos) << m;
  EXPECT_NE(m.find("(128, 11) float32 in the model"), std::string::npos) << m;
}

TEST_F(SavedModelErrors, EditedTensorListShape) {
  replace_in_file(json_, "\"shape\": [\n        128,\n        10\n      ]", "\"shape\": [\n        128,\n        12\n      ]");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("'dense_1/kernel' has shape (128, 10)"), std::string::npos) << m;
}

TEST_F(SavedModelErrors, UnknownLayerClass) {
  replace_in_file(json_, "\"class_name\": \"Dropout\"", "\"class_name\": \"Conv3D\"");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("layer 1"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown layer class_name 'Conv3D'"), std::string::npos) << m;
}

TEST_F(SavedModelErrors, WrongFormatVersion) {
  replace_in_file(json_, "\"format_version\": 1", "\"format_version\": 99");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("format version 99 is not the supported version 1"), std::string::npos) << m;
}

// get<int>() once read 4294967297 as 1.
TEST_F(SavedModelErrors, FormatVersionPast32BitsIsNotTruncated) {
  replace_in_file(json_, "\"format_version\": 1", "\"format_version\": 4294967297");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find("format version 4294967297 is not the supported version 1"), std::string::npos) << m;
}

TEST_F(SavedModelErrors, InvalidJsonAndMissingFields) {
  replace_in_file(json_, "\"rate\":", "\"rate\" ");
  auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;

  replace_in_file(json_, "\"rate\" ", "\"ratio\":");
  m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("layer 1: layer 'dropout' (Dropout): Dropout: missing argument rate"), std::string::npos) << m;
}

// 100,000-deep arrays once overflowed the stack while the error was built (a segfault).
TEST_F(SavedModelErrors, DeeplyNestedJsonIsRefusedBeforeAnythingRecurses) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  replace_in_file(json_, "\"format_version\": 1", "\"format_version\": " + deep);
  auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("nested deeper than 64 levels"), std::string::npos) << m;
  // Nesting inside a string is text, not structure.
  io::write_file_atomic(json_, "{\"format\": \"" + std::string(1000, '[') + "\"}");
  m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find("not a lockstep saved model"), std::string::npos) << m;
}

// Sequential.add's rule (Keras'): a layer's name given twice is refused, naming the file and the layer.
TEST_F(SavedModelErrors, ALayerNameTwiceIsRefusedWithKerasMessage) {
  replace_in_file(json_, "\"name\": \"dense_1\"", "\"name\": \"dense\"");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("layer 2: All layers added to a Sequential model should have unique names. Name 'dense' is "
                   "already the name of a layer in this model."),
            std::string::npos)
      << m;
}

TEST_F(SavedModelErrors, BadLayerConfigValueNamesTheFile) {
  replace_in_file(json_, "\"activation\": \"relu\"", "\"activation\": \"swishy\"");
  const auto m = io_message_of([&] { load_model(dir_); });
  EXPECT_NE(m.find(json_), std::string::npos) << m;
  EXPECT_NE(m.find("swishy"), std::string::npos) << m;
}

}  // namespace
}  // namespace lockstep
