// Sequential: Keras' summary layout, construction-time shape errors, naming (unique names), lazy
// build, the variables' walk.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/training/sequential.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {

using test::message_of;

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const std::string* find_line(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines)
    if (l.find(needle) != std::string::npos) return &l;
  return nullptr;
}

Sequential flagship() {
  return Sequential({layers::Dense(128, "relu", 784), layers::Dropout(0.2f), layers::Dense(10, "softmax")});
}

TEST(Sequential, FlagshipSummaryMatchesKerasLayout) {
  Sequential model = flagship();
  ASSERT_TRUE(model.built());
  const auto lines = lines_of(model.summary());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "Model: \"sequential\"");
  // Keras' sequential layout (line_length 65, positions .45/.85/1.0): columns start at 0 (with a
  // leading space), 29 and 55.
  const std::string* header = find_line(lines, "Layer (type)");
  ASSERT_NE(header, nullptr);
  EXPECT_EQ(header->find(" Layer (type)"), 0u) << *header;
  EXPECT_EQ(header->find("Output Shape"), 29u) << *header;
  EXPECT_EQ(header->find("Param #"), 55u) << *header;

  struct Row {
    const char* name;
    const char* shape;
    const char* params;
  };
  for (const Row& r : {Row{"dense (Dense)", "(None, 128)", "100480"}, Row{"dropout (Dropout)", "(None, 128)", "0"},
                       Row{"dense_1 (Dense)", "(None, 10)", "1290"}}) {
    const std::string* line = find_line(lines, r.name);
    ASSERT_NE(line, nullptr) << r.name;
    EXPECT_EQ(line->find(r.name), 1u) << *line;
    EXPECT_EQ(line->find(r.shape), 29u) << *line;
    EXPECT_EQ(line->find(r.params, 55), 55u) << *line;
  }
  EXPECT_NE(find_line(lines, "Total params: 101,770"), nullptr);
  EXPECT_NE(find_line(lines, "Trainable params: 101,770"), nullptr);
  EXPECT_NE(find_line(lines, "Non-trainable params: 0"), nullptr);
  // Rules of '_' and '=' the width of the table.
  EXPECT_NE(std::find(lines.begin(), lines.end(), std::string(65, '=')), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), std::string(65, '_')), lines.end());
  EXPECT_EQ(model.count_params(), 101770);
}

TEST(Sequential, IncompatibleLayersFailAtConstructionNamingBothShapes) {
  const std::string msg = message_of([] {
    Sequential model({layers::Dense(10, "relu", 784), layers::Dense(5, "linear", 20)});
  });
  EXPECT_NE(msg.find("(None, 20)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(None, 10)"), std::string::npos) << msg;
  // Dense after a rank-3 output applies to its last axis, as Keras' (no longer an error).
  Sequential model({layers::Input(Shape{28, 28}), layers::Dense(10)});
  EXPECT_EQ(model.output_shape(), (Shape{-1, 28, 10}));
}

TEST(Sequential, CallingOnWrongInputShapeNamesExpectedAndReceived) {
  Sequential model = flagship();
  const std::string msg = message_of([&] { (void)model(Tensor::zeros({2, 100})); });
  EXPECT_NE(msg.find("(None, 784)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 100)"), std::string::npos) << msg;
  EXPECT_EQ(model(Tensor::zeros({3, 784})).shape(), (Shape{3, 10}));
}

TEST(Sequential, LayersAreNamedLikeKeras) {
  Sequential model({layers::Dense(4, "relu", 3), layers::Dropout(0.1f), layers::Dense(4), layers::Dropout(0.1f),
                    layers::Dense(2), layers::Flatten()});
  std::vector<std::string> names;
  for (const auto& l : model.layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"dense", "dropout", "dense_1", "dropout_1", "dense_2", "flatten"}));
  // Variables carry the layer's name.
  EXPECT_EQ(model.variables()[0].name(), "dense/kernel");
  EXPECT_EQ(model.variables()[3].name(), "dense_1/bias");
}

TEST(Sequential, FlattenThenDenseInfersFeatures) {
  Sequential model({layers::Input(Shape{28, 28}), layers::Flatten(), layers::Dense(10, "softmax")});
  EXPECT_EQ(model.count_params(), 784 * 10 + 10);
  EXPECT_EQ(model(Tensor::zeros({2, 28, 28})).shape(), (Shape{2, 10}));
}

TEST(Sequential, WithoutInputDimBuildsOnFirstFit) {
  Sequential model({layers::Dense(8, "relu"), layers::Dense(2, "softmax")});
  EXPECT_FALSE(model.built());
  EXPECT_THROW((void)model.summary(), ValueError);
  model.compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy());
  const auto toy = test::make_toy(16);
  model.fit(toy.x, toy.y, {.epochs = 1, .batch_size = 8, .verbose = 0});
  EXPECT_TRUE(model.built());
  EXPECT_EQ(model.count_params(), 2 * 8 + 8 + 8 * 2 + 2);
  EXPECT_NE(model.summary().find("(None, 8)"), std::string::npos);
}

// A step keeps the model's variables from the step before (no vector made per step): a layer
// added after steps is trained by the next ones, and the model's trainable variables name it.
TEST(Sequential, ALayerAddedAfterTrainStepsIsTrainedByTheNextOnes) {
  Sequential model({layers::Dense(8, "relu", 12), layers::Dense(4)});
  model.compile(optimizers::SGD(0.1), losses::MeanSquaredError());
  const Tensor x = Tensor::ones({16, 12}), y = Tensor::zeros({16, 4});
  for (int i = 0; i < 2; ++i) (void)model.train_step(x, y);
  model.add(layers::Dense(4));
  const Variable added = model.layers().back()->variables().front();
  const std::vector<float> before = added.read_value().to_vector<float>();
  (void)model.train_step(x, y);
  EXPECT_NE(added.read_value().to_vector<float>(), before) << "the added layer's kernel was not updated";
  EXPECT_EQ(model.trainable_variables().size(), 6u);
}

// The walk is kept between steps while the list of layers and every layer's weights stay: a
// layer built before it is added makes no weights then, and must still be trained (the list's
// change alone makes the step's variables again).
TEST(Sequential, APrebuiltLayerAddedAfterTrainStepsIsTrainedByTheNextOnes) {
  Sequential model({layers::Dense(8, "relu", 12), layers::Dense(4)});
  model.compile(optimizers::SGD(0.1), losses::MeanSquaredError());
  const Tensor x = Tensor::ones({16, 12}), y = Tensor::zeros({16, 4});
  const auto extra = layers::Dense(4);
  extra->build(Shape{-1, 4}, 3);
  for (int i = 0; i < 2; ++i) (void)model.train_step(x, y);
  const std::uint64_t made = layers::Layer::weights_made();
  model.add(extra);
  EXPECT_EQ(layers::Layer::weights_made(), made) << "the added layer was built already";
  const std::vector<float> before = extra->variables().front().read_value().to_vector<float>();
  (void)model.train_step(x, y);
  EXPECT_NE(extra->variables().front().read_value().to_vector<float>(), before) << "the added layer was not updated";
  EXPECT_EQ(model.trainable_variables().size(), 6u);
}

// A deep model's variables are its layers', in layer order, each once: the walk that every step
// keeps (checkpoints and Keras files follow this order). Non-trainable weights (BatchNormalization's
// moving statistics) are in variables(), not in trainable_variables().
TEST(Sequential, ADeepModelListsEveryLayersVariablesInLayerOrder) {
  constexpr int kLayers = 200;
  Sequential model({layers::Input(Shape{3})});
  for (int i = 0; i < kLayers; ++i) model.add(i % 50 == 25 ? layers::BatchNormalization() : layers::Dense(3, "tanh"));
  std::vector<Variable> want, want_trainable;
  for (const auto& l : model.layers())
    for (const auto& v : l->variables()) {
      want.push_back(v);
      if (v.trainable()) want_trainable.push_back(v);
    }
  ASSERT_EQ(want.size(), 196u * 2 + 4u * 4);  // Dense: kernel, bias; BatchNormalization: gamma, beta, mean, variance
  ASSERT_EQ(want_trainable.size(), 196u * 2 + 4u * 2);
  const auto same = [](const std::vector<Variable>& a, const std::vector<Variable>& b) {
    return a.size() == b.size() &&
           std::equal(a.begin(), a.end(), b.begin(), [](const Variable& u, const Variable& v) { return u.is_same(v); });
  };
  EXPECT_TRUE(same(model.variables(), want));
  EXPECT_TRUE(same(model.trainable_variables(), want_trainable));
  EXPECT_EQ(model.variables()[2].name(), "dense_1/kernel");
  EXPECT_EQ(model.count_params(), 196 * (3 * 3 + 3) + 4 * 4 * 3);

  model.compile(optimizers::SGD(0.1), losses::MeanSquaredError());
  std::vector<float> xv(8 * 3);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 5) % 7) / 7.0f - 0.4f;
  const Tensor x = Tensor::from_vector(xv, Shape{8, 3}), y = Tensor::zeros({8, 3});
  const std::vector<float> last = want_trainable.back().read_value().to_vector<float>();
  for (int i = 0; i < 2; ++i) (void)model.train_step(x, y);
  EXPECT_NE(want_trainable.back().read_value().to_vector<float>(), last) << "the last layer was not trained";
  EXPECT_TRUE(same(model.variables(), want));
  EXPECT_TRUE(same(model.trainable_variables(), want_trainable));
}

// Keras 3's Sequential.add: every layer's name is unique within the model, so the same layer
// given twice, or two layers of one name, is a ValueError with Keras' message, and the model is
// left as it was (a saved model and a checkpoint name each layer's weights by its name).
TEST(Sequential, ALayerNameTwiceIsRefusedWithKerasMessage) {
  const std::string keras = "All layers added to a Sequential model should have unique names. Name 'hidden' is "
                            "already the name of a layer in this model. Update the `name` argument to pass a unique "
                            "name.";
  const auto hidden = layers::Dense({.units = 4, .activation = "tanh", .input_dim = 4, .name = "hidden"});
  EXPECT_EQ(test::message_of([&] { Sequential({hidden, hidden, layers::Dense(3, "softmax")}); }), keras);
  Sequential model({hidden});
  EXPECT_EQ(test::message_of([&] { model.add(hidden); }), keras);
  EXPECT_EQ(test::message_of([&] { model.add(layers::Dense({.units = 4, .name = "hidden"})); }), keras);
  ASSERT_EQ(model.layers().size(), 1u);
  EXPECT_EQ(model.count_params(), 4 * 4 + 4);
  model.add(layers::Dense(3, "softmax"));
  EXPECT_EQ(model.variables().size(), 4u);
  EXPECT_NE(model.summary().find("Total params: " + std::to_string(4 * 4 + 4 + 4 * 3 + 3) + "\n"), std::string::npos)
      << model.summary();
}

// Unnamed layers are numbered within their class past the names the model holds, so a name a
// user gave (dense_1) is never given again.
TEST(Sequential, UnnamedLayersAreNumberedPastTheNamesTaken) {
  Sequential model({layers::Dense({.units = 4, .input_dim = 3, .name = "dense_1"}), layers::Dense(4), layers::Dense(4),
                    layers::Dense({.units = 2, .name = "dense"}), layers::Dense(2)});
  std::vector<std::string> names;
  for (const auto& l : model.layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"dense_1", "dense_2", "dense_3", "dense", "dense_4"}));
}

TEST(Sequential, SoftmaxOutputsAreProbabilities) {
  Sequential model = flagship();
  std::vector<float> v(3 * 784);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37) % 255) / 255.0f;
  const auto p = model(Tensor::from_vector(v, Shape{3, 784})).to_vector<float>();
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int c = 0; c < 10; ++c) {
      EXPECT_GE(p[r * 10 + c], 0.0f);
      s += p[r * 10 + c];
    }
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

}  // namespace
}  // namespace lockstep
