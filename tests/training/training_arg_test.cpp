// Keras' training= of a call (layer(x, training=False), base_model(x, training=False)): the call
// runs in that mode whatever fit, evaluate, predict or the model's call run in; a shared layer's
// calls keep their own modes; a nested model's own calls keep theirs; Keras files keep the mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {

std::vector<std::vector<float>> values_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (const auto& v : vars) out.push_back(v.read_value().to_vector<float>());
  return out;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
std::string tmp_dir() {
  const auto dir = std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "training_arg";
  std::filesystem::create_directories(dir);
  return dir.string();
}

const test::Classification& data() {
  static const test::Classification d = test::random_classification(64, 6, 3, 7);
  return d;
}
const FitOptions kFit{.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0};

// The transfer-learning guide's model: a base (Dense, BatchNormalization, Dropout) called as
// base(x, training) inside a model with a head of its own.
struct Guide {
  std::unique_ptr<Functional> base, model;
  layers::LayerPtr bn() const { return base->layers()[2]; }
};
Guide guide(std::optional<bool> training) {
  set_random_seed(3);
  Guide g;
  const KerasTensor in = Input({6}, "base_input");
  KerasTensor h = call(layers::Dense(8, "relu"), in);
  h = call(layers::BatchNormalization(), h);
  h = call(layers::Dropout(0.5f), h);
  g.base = std::make_unique<Functional>(in, h, "base");
  const KerasTensor x = Input({6});
  const KerasTensor y = call(*g.base, {x}, {.training = training}).front();
  g.model = std::make_unique<Functional>(x, call(layers::Dense(3, "softmax"), y), "guide");
  g.model->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy());
  return g;
}

// base(x, training=False) inside fit: BatchNormalization keeps its moving statistics (its gamma
// and beta still train: the base is not frozen), Dropout drops nothing, and a training-mode
// forward (a custom loop's) is the inference forward. Without training=, fit moves the statistics.
TEST(TrainingArg, ABaseCalledWithTrainingFalseInfersInFit) {
  for (const std::optional<bool> training : {std::optional<bool>(false), std::optional<bool>()}) {
    SCOPED_TRACE(training ? "training=False" : "training=None");
    Guide g = guide(training);
    const auto& bn_vars = g.bn()->variables();  // gamma, beta, moving_mean, moving_variance
    ASSERT_EQ(bn_vars.size(), 4u);
    const auto before = values_of(bn_vars);
    g.model->fit(data().x, data().y, kFit);
    const auto after = values_of(bn_vars);
    EXPECT_NE(after[0], before[0]);  // gamma trains either way
    EXPECT_EQ(after[2] == before[2] && after[3] == before[3], training.has_value());
    const Tensor x = data().x.slice(0, 16);
    const Tensor inferred = (*g.model)(x, layers::CallContext{.training = false});
    const Tensor trained = (*g.model)(x, layers::CallContext{.training = true, .step = 5});
    EXPECT_EQ(same_bits(trained, inferred), training.has_value());
  }
}

// Dropout(x, training=True) drops in predict too (Keras' Monte Carlo dropout).
TEST(TrainingArg, ADropoutCalledWithTrainingTrueDropsInPredict) {
  const KerasTensor in = Input({64});
  Functional fixed(in, call(layers::Dropout(0.5f), in, {.training = true}));
  Functional plain(in, call(layers::Dropout(0.5f), in));
  const Tensor ones = Tensor::ones({4, 64});
  const auto predicted = fixed.predict(ones).to_vector<float>();
  const auto count = [&](float value) { return std::count(predicted.begin(), predicted.end(), value); };
  EXPECT_GT(count(0.0f), 0);
  EXPECT_GT(count(2.0f), 0);  // a kept unit is scaled by 1 / (1 - rate)
  EXPECT_EQ(count(0.0f) + count(2.0f), static_cast<std::ptrdiff_t>(predicted.size()));
  EXPECT_TRUE(same_bits(plain.predict(ones), ones));
}

// BatchNormalization(x, training=True) in predict and evaluate normalises by the batch's
// statistics (the call's mode, as Dropout's above) and leaves its moving statistics alone: predict
// and evaluate change no weight (Keras 3's never do; tf.keras 2's moved them). A plain call of the
// model, fit's mode none, is a training-mode call of the layer, which moves them (Keras 3's too).
TEST(TrainingArg, ABatchNormalizationCalledWithTrainingTrueLeavesItsStatisticsInPredictAndEvaluate) {
  const KerasTensor in = Input({4});
  const auto bn = layers::BatchNormalization();
  Functional model(in, call(bn, in, {.training = true}));
  model.compile(optimizers::SGD(0.1), losses::MeanSquaredError());
  const Tensor x = add_scalar(scale(test::random_uniform({16, 4}, 5), 2.0f), 3.0f);  // means near 3
  const auto before = values_of(bn->variables());  // gamma, beta, moving_mean, moving_variance
  ASSERT_EQ(before.size(), 4u);
  const std::vector<float> predicted = model.predict(x).to_vector<float>();
  EXPECT_EQ(values_of(bn->variables()), before);
  // By the batch's statistics: each column's mean is 0 (the moving ones, 0 and 1, would leave x).
  for (int c = 0; c < 4; ++c) {
    double mean = 0;
    for (int r = 0; r < 16; ++r) mean += predicted[static_cast<std::size_t>(r * 4 + c)] / 16.0;
    EXPECT_NEAR(mean, 0.0, 1e-5) << "column " << c;
  }
  (void)model.evaluate(x, Tensor::zeros({16, 4}), {.batch_size = 8, .verbose = 0});
  EXPECT_EQ(values_of(bn->variables()), before);
  (void)model(x);
  const auto called = values_of(bn->variables());
  EXPECT_NE(called[2], before[2]);
  EXPECT_NE(called[3], before[3]);
}

// One Dropout called twice, once with training=False and once without: in a training-mode
// forward the first call passes its input through and the second drops.
TEST(TrainingArg, ASharedLayersCallsKeepTheirOwnModes) {
  const auto dropout = layers::Dropout(0.5f);
  const KerasTensor in = Input({64});
  const KerasTensor a = call(dropout, in, {.training = false});
  const KerasTensor b = call(dropout, in);
  Functional model(in, {{"a", a}, {"b", b}});  // outputs in the keys' order
  ASSERT_EQ(model.layers().size(), 2u);  // one Dropout, called twice
  const Tensor ones = Tensor::ones({4, 64});
  const auto outs = model.forward_all({&ones, 1}, layers::CallContext{.training = true, .seed = 1, .step = 1});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_TRUE(same_bits(outs[0].output, ones));
  EXPECT_FALSE(same_bits(outs[1].output, ones));
  const auto inferred = model.forward_all({&ones, 1}, layers::CallContext{.training = false});
  EXPECT_TRUE(same_bits(inferred[0].output, ones));
  EXPECT_TRUE(same_bits(inferred[1].output, ones));
}

// A model called with training=False inlines its calls with that mode, except a call that has a
// mode of its own (the innermost training= decides); a Sequential's calls all take the model's.
TEST(TrainingArg, ANestedModelsOwnCallModesGoBeforeTheOuterCalls) {
  const KerasTensor in = Input({64});
  const KerasTensor kept = call(layers::Dropout(0.5f), in, {.training = true});
  Functional inner(in, call(layers::Dropout(0.5f), kept));
  const KerasTensor x = Input({64});
  Functional outer(x, call(inner, {x}, {.training = false}).front());
  ASSERT_EQ(outer.nodes().size(), 3u);
  EXPECT_EQ(outer.nodes()[1].training, std::optional<bool>(true));
  EXPECT_EQ(outer.nodes()[2].training, std::optional<bool>(false));

  Sequential seq({layers::Dense(4, "relu", 64), layers::Dropout(0.5f)});
  const KerasTensor s = Input({64});
  Functional wrapped(s, call(seq, {s}, {.training = false}).front());
  for (std::size_t i = 1; i < wrapped.nodes().size(); ++i)
    EXPECT_EQ(wrapped.nodes()[i].training, std::optional<bool>(false)) << i;
}

// A model call takes training= alone: a MultiHeadAttention's keywords are named as refused.
TEST(TrainingArg, AModelCallRefusesAttentionKeywords) {
  const KerasTensor in = Input({4});
  Functional inner(in, call(layers::Dense(2), in));
  const KerasTensor x = Input({4});
  const std::string what = test::message_of([&] { (void)call(inner, {x}, {.use_causal_mask = true}); });
  EXPECT_NE(what.find("model '" + inner.name() + "' takes no use_causal_mask, attention_mask"), std::string::npos)
      << what;
}

// A .keras file keeps each call's mode ("kwargs": {"training": false} on the inlined calls, as
// Keras writes a layer call's): loaded, the model predicts the same bits and fit leaves the
// moving statistics alone. A Dropout's training=False cannot be kept (Keras writes it on every
// Dropout call): saving it says so, and the loaded call follows the model's mode.
TEST(TrainingArg, AKerasFileKeepsEachCallsMode) {
  Guide g = guide(false);
  g.model->fit(data().x, data().y, kFit);
  const std::string path = tmp_dir() + "/guide.keras";
  ::testing::internal::CaptureStderr();
  save_model(*g.model, path);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("layer 'dropout"), std::string::npos) << warned;
  EXPECT_NE(warned.find("is called with training=False, which a Keras file cannot keep"), std::string::npos)
      << warned;
  auto loaded = load_model(path);
  const auto* functional = dynamic_cast<const Functional*>(loaded.get());
  ASSERT_NE(functional, nullptr);
  std::vector<std::optional<bool>> modes;
  for (const auto& n : functional->nodes()) modes.push_back(n.training);
  // input, dense, batch_normalization, dropout, head
  const std::vector<std::optional<bool>> want{std::nullopt, false, false, std::nullopt, std::nullopt};
  EXPECT_EQ(modes, want);
  EXPECT_TRUE(same_bits(loaded->predict(data().x), g.model->predict(data().x)));
  const auto& bn = loaded->layers()[2];
  ASSERT_EQ(bn->class_name(), "BatchNormalization");
  const auto before = values_of(bn->variables());
  ::testing::internal::CaptureStderr();
  loaded->fit(data().x, data().y, kFit);
  (void)::testing::internal::GetCapturedStderr();
  const auto after = values_of(bn->variables());
  EXPECT_EQ(after[2], before[2]);
  EXPECT_EQ(after[3], before[3]);

  // training=True on a Dropout (and on any layer) is kept, and written as Keras writes it.
  const KerasTensor in = Input({64});
  Functional mc(in, call(layers::Dropout(0.5f), in, {.training = true}), "mc");
  save_model(mc, tmp_dir() + "/mc.keras");
  const auto mc_loaded = load_model(tmp_dir() + "/mc.keras");
  const auto* mc_functional = dynamic_cast<const Functional*>(mc_loaded.get());
  ASSERT_NE(mc_functional, nullptr);
  EXPECT_EQ(mc_functional->nodes()[1].training, std::optional<bool>(true));
  EXPECT_FALSE(same_bits(mc_loaded->predict(Tensor::ones({4, 64})), Tensor::ones({4, 64})));
}

// Keras writes "training": false on every recurrent layer's call (RNN.call's default), as on
// Dropout's: read from a file, that value leaves the call to the model's mode, so a loaded LSTM's
// dropout acts in fit. Saving a call really given training=False says the file cannot keep it.
TEST(TrainingArg, ARecurrentCallsFileTrainingFalseFollowsTheModelsMode) {
  const KerasTensor in = Input({5, 3});
  const auto lstm = layers::LSTM({.units = 4, .dropout = 0.5f});
  Functional model(in, call(layers::Dense(1), call(lstm, in, {.training = false})), "rnn_mode");
  const std::string path = tmp_dir() + "/rnn_mode.keras";
  ::testing::internal::CaptureStderr();
  save_model(model, path);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("layer 'lstm"), std::string::npos) << warned;
  EXPECT_NE(warned.find("which a Keras file cannot keep"), std::string::npos) << warned;
  const auto loaded = load_model(path);
  const auto* functional = dynamic_cast<const Functional*>(loaded.get());
  ASSERT_NE(functional, nullptr);
  ASSERT_EQ(functional->nodes().size(), 3u);
  EXPECT_EQ(functional->nodes()[1].training, std::nullopt);
}

}  // namespace
}  // namespace lockstep
