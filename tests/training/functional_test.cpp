// The functional API: a Functional model computes what the equivalent Sequential does (forward
// and a training step), its layers and variables come in Keras' order, ResNet-20 has the paper's
// shape, saved models round-trip it, and every wrong graph is an error naming layer and shapes.
#include "lockstep/training/functional.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error_message.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/tensor/kernel_launches.hpp"

namespace lockstep {
namespace {
using test::message_of;

Tensor images(std::int64_t n, std::uint64_t salt) {
  std::vector<float> v(static_cast<std::size_t>(n * 6 * 6 * 2));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37 + salt * 11) % 101) / 101.0f;
  return Tensor::from_vector(v, Shape{n, 6, 6, 2});
}
Tensor labels(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>((i * 7) % 3);
  return Tensor::from_vector(v, Shape{n});
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

std::vector<layers::LayerPtr> convnet_layers() {
  return {layers::Conv2D({.filters = 4, .kernel_size = {3, 3}, .padding = "same", .use_bias = false}),
          layers::BatchNormalization(), layers::Activation("relu"), layers::MaxPooling2D(),
          layers::Flatten(), layers::Dropout(0.3f), layers::Dense(3, "softmax")};
}

// Each node's output is let go once its last consumer ran, so inference holds a few activations
// at a time, not the whole pass (ResNet-20 evaluating at batch 1024 peaked at 5 GB before).
TEST(Functional, InferenceHoldsAFewActivationsNotTheWholePass) {
  set_random_seed(1);
  const std::int64_t n = 1024, width = 256;
  const KerasTensor in = Input({width});
  KerasTensor x = in;
  for (int i = 0; i < 24; ++i) x = call(layers::Dense(width, "relu"), x);
  Functional model(in, x);
  const Tensor batch = Tensor::ones({n, width});
  (void)model.predict(batch, {.batch_size = n});  // builds the layers and warms every cache
  auto& ctx = current_compute_context();
  const std::uint64_t before = context_bytes_in_use(ctx);
  reset_context_peak_bytes(ctx);
  const Tensor out = model.predict(batch, {.batch_size = n});
  const std::uint64_t activation = static_cast<std::uint64_t>(n * width) * sizeof(float);
  EXPECT_EQ(out.dim(0), n);
  EXPECT_LE(context_peak_bytes(ctx) - before, 6 * activation)
      << "24 layers' outputs are " << 24 * activation << " bytes";
}

TEST(Functional, ComputesWhatTheEquivalentSequentialDoesForwardAndInATrainingStep) {
  set_random_seed(5);
  auto seq_layers = convnet_layers();
  seq_layers.insert(seq_layers.begin(), layers::Input({6, 6, 2}));
  Sequential seq(seq_layers);
  const KerasTensor in = Input({6, 6, 2});
  KerasTensor x = in;
  for (const auto& l : convnet_layers()) x = call(l, x);
  Functional fun(in, x);
  // Same layer names and variables in the same order; the same seed gives the same initial weights.
  const auto vs = seq.variables(), vf = fun.variables();
  ASSERT_EQ(vs.size(), vf.size());
  for (std::size_t i = 0; i < vs.size(); ++i) {
    EXPECT_EQ(vs[i].name(), vf[i].name());
    EXPECT_TRUE(same_bits(vs[i].value(), vf[i].value())) << vs[i].name();
    // And whatever the weights are, the two compute alike: set them to the Sequential's, moved.
    vs[i].assign(add_scalar(vs[i].value(), 0.01f * static_cast<float>(i + 1)));
    vf[i].assign(vs[i].value());
  }
  EXPECT_EQ(fun.input_shape(), (Shape{-1, 6, 6, 2}));
  EXPECT_EQ(fun.output_shape(), (Shape{-1, 3}));
  EXPECT_TRUE(same_bits(fun(images(5, 1)), seq(images(5, 1))));

  EXPECT_TRUE(same_bits(fun(images(5, 1), {.training = true}), seq(images(5, 1), {.training = true})));

  // One fit step each (Dropout and BatchNormalization in training mode): the same loss and weights.
  for (Model* m : {static_cast<Model*>(&seq), static_cast<Model*>(&fun)})
    m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const auto hs = seq.fit(images(8, 2), labels(8), {.batch_size = 8, .shuffle = false, .verbose = 0});
  // The Functional's softmax output is left to the loss as the Sequential's is: one kernel for both.
  const std::uint64_t softmaxes = detail::kernel_launches(Device{}, "softmax");
  const std::uint64_t fused = detail::kernel_launches(Device{}, "softmax_sparse_xent");
  const auto hf = fun.fit(images(8, 2), labels(8), {.batch_size = 8, .shuffle = false, .verbose = 0});
  EXPECT_EQ(detail::kernel_launches(Device{}, "softmax"), softmaxes);
  EXPECT_EQ(detail::kernel_launches(Device{}, "softmax_sparse_xent"), fused + 1);
  EXPECT_EQ(hs.history.at("loss"), hf.history.at("loss"));
  for (std::size_t i = 0; i < vs.size(); ++i) {
    EXPECT_TRUE(same_bits(vs[i].value(), vf[i].value())) << vs[i].name();
  }
  EXPECT_TRUE(same_bits(fun.predict(images(4, 3)), seq.predict(images(4, 3))));
}

// Keras' weight sharing: a Functional that calls one layer twice has one set of its weights,
// listed once in variables() (so counted once, and updated once per step: a variable listed
// twice had its gradient applied twice). Adam's first step moves each weight by its learning
// rate at most, so a second application would show. A Sequential given one layer twice refuses
// it (Keras' rule; Sequential.ALayerNameTwiceIsRefusedWithKerasMessage).
TEST(Functional, ALayerCalledTwiceSharesItsWeightsUpdatedOncePerStep) {
  set_random_seed(7);
  const KerasTensor in = Input({4});
  const auto shared = layers::Dense(4, "tanh");
  Functional fun(in, call(layers::Dense(3, "softmax"), call(shared, call(shared, in))));
  EXPECT_EQ(fun.layers().size(), 3u);  // the InputLayer, the shared Dense, the output
  const auto vars = fun.variables();
  ASSERT_EQ(vars.size(), 4u);  // the shared Dense's kernel and bias, the output's
  EXPECT_TRUE(vars[0].is_same(shared->variables()[0]));
  EXPECT_EQ(fun.trainable_variables().size(), 4u);
  const std::int64_t params = 4 * 4 + 4 + 4 * 3 + 3;
  EXPECT_EQ(fun.count_params(), params);
  EXPECT_NE(fun.summary().find("Total params: " + std::to_string(params) + "\n"), std::string::npos);
  Sequential seq({shared});
  EXPECT_THROW(seq.add(shared), ValueError);

  std::vector<float> xv(8 * 4);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 13) % 7) / 7.0f - 0.4f;
  const Tensor x = Tensor::from_vector(xv, Shape{8, 4});
  constexpr double kRate = 0.01;
  fun.compile(optimizers::Adam(kRate), losses::SparseCategoricalCrossentropy());
  const std::vector<float> before = vars[0].read_value().to_vector<float>();
  (void)fun.train_step(x, labels(8));
  const std::vector<float> after = vars[0].read_value().to_vector<float>();
  double most = 0;
  for (std::size_t i = 0; i < before.size(); ++i) most = std::max(most, std::abs(double{after[i]} - before[i]));
  EXPECT_GT(most, 0.9 * kRate);
  EXPECT_LT(most, 1.01 * kRate) << "the shared kernel was updated more than once";
}

// Keras' model(x): a model called on KerasTensors calls its layers there, the same objects, so
// the outer model holds them (not the inner model) and trains the weights the inner one computes
// with. Unbuilt, the layers a Sequential named are named by the outer model, so two Sequentials
// of one Dense each (both named dense) give it dense and dense_1, as Keras names them.
TEST(Functional, AModelCalledOnKerasTensorsSharesItsLayersAndTheirWeights) {
  set_random_seed(3);
  Sequential encoder({layers::Dense(6, "tanh")});
  Sequential other({layers::Dense(6, "tanh")});
  ASSERT_EQ(encoder.layers()[0]->name(), other.layers()[0]->name());
  const KerasTensor hin = Input({6});
  Functional head(hin, call(layers::Dense(3, "softmax"), hin), "head");
  const KerasTensor in = Input({4});
  const std::vector<KerasTensor> encoded = call(encoder, {in});
  ASSERT_EQ(encoded.size(), 1u);
  const KerasTensor merged = call(layers::Add(), {encoded[0], call(other, {in})[0]});
  Functional outer(in, call(head, {merged})[0]);
  std::vector<std::string> names;
  for (const auto& l : outer.layers()) names.push_back(l->name());
  EXPECT_EQ(names.size(), 5u);  // the input, both Sequentials' Dense, Add, the head's Dense
  EXPECT_NE(std::find(names.begin(), names.end(), "dense"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "dense_1"), names.end());
  EXPECT_TRUE(outer.variables()[0].is_same(encoder.variables()[0]) ||
              outer.variables()[0].is_same(other.variables()[0]));

  // The outer model computes the inner ones composed, and its fit trains their weights.
  for (Sequential* s : {&encoder, &other}) s->build(Shape{-1, 4});  // on the layers the outer model built
  const Tensor x = Tensor::from_vector(std::vector<float>{0.1f, -0.2f, 0.3f, 0.5f, -0.4f, 0.2f, 0.0f, 0.7f}, {2, 4});
  EXPECT_TRUE(same_bits(outer(x), head(add(encoder(x), other(x)))));
  const std::vector<float> before = encoder.variables()[0].read_value().to_vector<float>();
  outer.compile(optimizers::SGD(0.5), losses::SparseCategoricalCrossentropy());
  (void)outer.train_step(x, labels(2));
  EXPECT_NE(encoder.variables()[0].read_value().to_vector<float>(), before);
  EXPECT_TRUE(same_bits(outer(x), head(add(encoder(x), other(x)))));

  EXPECT_VALUE_ERROR(call(head, {in}), "model 'head' takes input 'input_layer' of shape (None, 6) but is called on (None, 4)");
  EXPECT_VALUE_ERROR(call(head, {merged, merged}), "model 'head' takes 1 inputs (input_layer) but is called on 2");
  EXPECT_VALUE_ERROR(call(encoder, {in, in}), "Sequential 'sequential' takes one input but is called on 2");
}

// A residual block: y = relu(bn(conv(x))); out = Add([x, y]).
struct Residual {
  KerasTensor in, out;
};
Residual residual_block() {
  const KerasTensor in = Input({6, 6, 2});
  const KerasTensor y = call(layers::Activation("relu"),
                             call(layers::BatchNormalization(),
                                  call(layers::Conv2D({.filters = 2, .kernel_size = {3, 3}, .padding = "same"}), in)));
  return {in, call(layers::Add(), {in, y})};
}

TEST(Functional, OrdersLayersAsKerasAndSummarisesTheirConnections) {
  const auto [in, sum] = residual_block();
  const KerasTensor out = call(layers::Dense(3, "softmax"), call(layers::Flatten(), sum));
  Functional model(in, out, "residual");
  std::vector<std::string> names;
  for (const auto& l : model.layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"input_layer", "conv2d", "batch_normalization", "activation", "add",
                                             "flatten", "dense"}));
  std::vector<std::string> vars;
  for (const auto& v : model.variables()) vars.push_back(v.name());
  EXPECT_EQ(vars, (std::vector<std::string>{"conv2d/kernel", "conv2d/bias", "batch_normalization/gamma",
                                            "batch_normalization/beta", "batch_normalization/moving_mean",
                                            "batch_normalization/moving_variance", "dense/kernel", "dense/bias"}));
  const std::string s = model.summary();
  EXPECT_NE(s.find("Connected to"), std::string::npos) << s;
  EXPECT_NE(s.find(" add (Add)"), std::string::npos) << s;
  EXPECT_NE(s.find("input_layer[0][0]"), std::string::npos) << s;
  EXPECT_NE(s.find("activation[0][0]"), std::string::npos) << s;
  EXPECT_NE(s.find("Total params: " + std::to_string(model.count_params())), std::string::npos) << s;
  // The output is the input plus the branch.
  model.variables()[0].assign(Tensor::zeros({3, 3, 2, 2}));  // the branch: relu(bn(0)) = relu(beta) = 0
  const Tensor x = images(2, 4);
  Functional to_sum(in, sum, "sum");
  EXPECT_TRUE(same_bits(to_sum(x), x));
}

TEST(Functional, AnAddOfDifferentShapesIsAnErrorNamingTheLayerAndTheShapes) {
  const KerasTensor in = Input({8, 8, 3});
  const KerasTensor a = call(layers::Conv2D(16, {3, 3}, "relu", "same"), in);
  const KerasTensor b = call(layers::Conv2D(32, {3, 3}, "relu", "same"), in);
  EXPECT_VALUE_ERROR(call(layers::Add(), {a, b}),
                 "layer 'add' (Add) needs inputs of one shape, got [(None, 8, 8, 16), (None, 8, 8, 32)]");
  EXPECT_VALUE_ERROR(call(layers::Add(), a), "layer 'add' (Add) should be called on a list of at least 2 inputs, got 1");
  EXPECT_VALUE_ERROR(call(layers::Dense(4), {a, b}), "layer 'dense' (Dense) takes one input but is called on a list of 2");
  EXPECT_EQ(call(layers::Dense(4), a).shape(), (Shape{-1, 8, 8, 4}));  // as Keras: the last axis, any rank
  EXPECT_VALUE_ERROR(call(layers::Dense(4), KerasTensor()), "undefined symbolic tensor");
}

TEST(Functional, AnOutputNotComputedFromTheInputsIsAnErrorNamingWhatItDependsOn) {
  const KerasTensor in = Input({4});
  const KerasTensor other = Input({4}, "other_input");
  const KerasTensor out = call(layers::Add(), {call(layers::Dense(4), in), call(layers::Dense(4), other)});
  EXPECT_VALUE_ERROR(Functional(in, out), "the output is not reachable from the inputs alone: it depends on layer "
                                      "'other_input' (InputLayer) of shape (None, 4), which is not the model's input");
  EXPECT_VALUE_ERROR(Functional(call(layers::Dense(2), in), out), "inputs must be a lockstep::Input(shape)");
}

TEST(Functional, ALayerReusedOnAnotherShapeIsAnErrorNamingBothShapes) {
  const KerasTensor in = Input({8});
  const auto dense = layers::Dense(16);
  const KerasTensor h = call(dense, in);
  // Along one path: found at the call.
  EXPECT_VALUE_ERROR(call(dense, h), "layer 'dense' (Dense) is called on (None, 16) but was called before on (None, 8)");
  // On two branches too (as Keras, which builds a layer at its first call): found at the call,
  // by a lookup rather than a walk of the graph behind it (quadratic for a chain of calls).
  const auto shared = layers::Dense(4, "linear");
  const KerasTensor a = call(shared, in);
  const KerasTensor branch = call(layers::Dense(3), in);
  EXPECT_VALUE_ERROR(call(shared, branch), "layer 'dense' (Dense) is called on (None, 3) but was called before on (None, 8)");
  // A layer built before on another shape: found at the call as well.
  const auto built = layers::Dense(4, "linear");
  built->build(Shape{-1, 3}, 1);
  EXPECT_VALUE_ERROR(call(built, in), "was built for input shape (None, 3) and cannot be called on (None, 8)");
  // Reused on the same shape, the layer's weights are shared: one set of variables.
  const auto twice = layers::Dense(8, "tanh");
  Functional siamese(in, call(layers::Add(), {call(twice, in), call(twice, call(layers::Dense(8), in))}));
  EXPECT_EQ(siamese.variables().size(), 4u);  // the shared layer's kernel and bias, the other Dense's
  EXPECT_EQ(siamese(Tensor::zeros({2, 8})).shape(), (Shape{2, 8}));
}

TEST(ResNet20, HasThePapersLayersAndWeightsAndTakesAnyImageShape) {
  auto cifar = applications::ResNet20({.input_shape = {32, 32, 3}, .classes = 10});
  int convs = 0, adds = 0, norms = 0;
  for (const auto& l : cifar->layers()) {
    convs += l->class_name() == "Conv2D";
    adds += l->class_name() == "Add";
    norms += l->class_name() == "BatchNormalization";
  }
  EXPECT_EQ(convs, 21);  // 19 on the main path (+ the Dense: 20 weighted layers) and 2 projections
  EXPECT_EQ(adds, 9);
  EXPECT_EQ(norms, 21);
  // 0.27M parameters (He et al., table 6), counted by hand: see applications.hpp's layers.
  EXPECT_EQ(cifar->count_params(), 274042);
  std::int64_t trainable = 0;
  for (const auto& v : cifar->trainable_variables()) trainable += v.shape().numel();
  EXPECT_EQ(cifar->count_params() - trainable, 2 * 784);  // moving mean and variance of 784 channels
  EXPECT_EQ(cifar->output_shape(), (Shape{-1, 10}));
  auto mnist = applications::ResNet20({.input_shape = {28, 28, 1}, .classes = 10});
  EXPECT_EQ(mnist->input_shape(), (Shape{-1, 28, 28, 1}));
  const Tensor p = (*mnist)(Tensor::zeros({2, 28, 28, 1}));
  EXPECT_EQ(p.shape(), (Shape{2, 10}));
  EXPECT_NEAR(sum(p).to_vector<float>()[0], 2.0f, 1e-5f);
  EXPECT_VALUE_ERROR(applications::ResNet20({.input_shape = {784}}), "ResNet20: input_shape must be (height, width, channels)");
}

TEST(Functional, SavedModelRoundTripPredictsTheSameAndKeepsTraining) {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "functional" / "saved").string();
  std::filesystem::remove_all(dir);
  set_random_seed(9);
  const auto [in, sum] = residual_block();
  Functional model(in, call(layers::Dense(3, "softmax"), call(layers::Flatten(), sum)), "residual");
  model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  model.fit(images(8, 5), labels(8), {.batch_size = 4, .verbose = 0});
  save_model(model, dir);
  auto loaded = load_model(dir);
  ASSERT_NE(dynamic_cast<Functional*>(loaded.get()), nullptr);
  EXPECT_EQ(loaded->summary(), model.summary());
  EXPECT_TRUE(same_bits(loaded->predict(images(4, 6)), model.predict(images(4, 6))));
  // The optimizer's state came too: the next step is the same.
  model.fit(images(8, 7), labels(8), {.batch_size = 8, .shuffle = false, .verbose = 0});
  loaded->fit(images(8, 7), labels(8), {.batch_size = 8, .shuffle = false, .verbose = 0});
  const auto a = model.variables(), b = loaded->variables();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i].value(), b[i].value())) << a[i].name();
  // And as a Keras file: the same layers, weights and predictions.
  save_model(model, dir + ".keras");
  auto from_keras = load_model(dir + ".keras");
  ASSERT_NE(dynamic_cast<Functional*>(from_keras.get()), nullptr);
  EXPECT_EQ(from_keras->summary(), loaded->summary());
  EXPECT_TRUE(same_bits(from_keras->predict(images(4, 6)), loaded->predict(images(4, 6))));
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {
// A Keras file's call arguments: Keras writes {"mask": null} for BatchNormalization, and a call's
// training (kept: the call's mode); a training that is not a bool, or any other keyword lockstep's
// layers do not take, is refused naming it.
TEST(Functional, KerasCallKeywordsThatAreSetAreRefusedNamingThem) {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "functional").string();
  std::filesystem::create_directories(dir);
  const auto [in, sum] = residual_block();
  Functional model(in, call(layers::Dense(3, "softmax"), call(layers::Flatten(), sum)), "residual");
  save_model(model, dir + "/kw.keras");
  auto entries = io::decode_zip(io::read_file(dir + "/kw.keras"), "kw.keras");
  auto& config = *std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.name == "config.json"; });
  auto j = nlohmann::json::parse(config.bytes);
  auto& bn = j["config"]["layers"][2];
  ASSERT_EQ(bn["class_name"], "BatchNormalization");
  const std::vector<std::pair<nlohmann::json, std::string>> cases{
      {{{"mask", nullptr}, {"training", nullptr}}, ""},
      {{{"mask", nullptr}, {"training", false}}, ""},
      {{{"mask", nullptr}, {"training", true}}, ""},
      {{{"training", "yes"}}, "call 0 has the argument training=\"yes\", which must be true, false or null"},
      {{{"query_mask", true}}, "call 0 has the argument query_mask=true, which lockstep's layers do not take"}};
  for (const auto& [kwargs, error] : cases) {
    SCOPED_TRACE(kwargs.dump());
    bn["inbound_nodes"][0]["kwargs"] = kwargs;
    config.bytes = j.dump();
    io::write_file_atomic(dir + "/kw2.keras", io::encode_zip(entries));
    if (error.empty()) {
      const auto loaded = load_model(dir + "/kw2.keras");
      const auto& node = dynamic_cast<const Functional&>(*loaded).nodes()[2];
      ASSERT_EQ(loaded->layers()[node.layer]->class_name(), "BatchNormalization");
      const nlohmann::json& training = kwargs.at("training");
      EXPECT_EQ(node.training, training.is_null() ? std::nullopt : std::optional<bool>(training.get<bool>()));
      if (!node.training.value_or(false)) {  // training=True normalises on the batch's statistics
        EXPECT_TRUE(same_bits(loaded->predict(images(2, 1)), model.predict(images(2, 1))));
      }
    } else {
      try {
        load_model(dir + "/kw2.keras");
        ADD_FAILURE() << "no error";
      } catch (const IOError& e) {
        EXPECT_NE(std::string(e.what()).find("kw2.keras': layer 'batch_normalization': " + error), std::string::npos)
            << e.what();
      }
    }
  }  // A call argument that is not a symbolic tensor is named, not followed.
  bn["inbound_nodes"][0]["kwargs"] = nlohmann::json::object();
  bn["inbound_nodes"][0]["args"][0]["config"] = "conv2d";
  config.bytes = j.dump();
  io::write_file_atomic(dir + "/kw3.keras", io::encode_zip(entries));
  try {
    load_model(dir + "/kw3.keras");
    ADD_FAILURE() << "no error";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("kw3.keras': layer 'batch_normalization': an argument is not a symbolic tensor"),
              std::string::npos)
        << e.what();
  }
}

// Keras writes an element-wise merge's mask of two masks as a LogicalOr node handed to the next
// layer as its mask keyword: read as a mask (lockstep's merge makes it alike), and one whose
// arguments are not masks, or not tensors, is refused naming it.
TEST(Functional, AKerasLogicalOrOfMasksIsReadAsAMaskAndAnythingElseNamed) {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "functional").string();
  std::filesystem::create_directories(dir);
  set_random_seed(4);
  const KerasTensor in = Input({5});
  const KerasTensor e = call(layers::Embedding(7, 4, true), in);
  const KerasTensor added = call(layers::Add(), {e, call(layers::Dense(4), e)});
  Functional model(in, call(layers::Dense(3), call(layers::GlobalAveragePooling1D(), added)), "merged");
  save_model(model, dir + "/or.keras");
  auto entries = io::decode_zip(io::read_file(dir + "/or.keras"), "or.keras");
  auto& config = *std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.name == "config.json"; });
  const auto j = nlohmann::json::parse(config.bytes);
  const auto at = [&](const char* cls) {
    const auto& ls = j["config"]["layers"];
    return std::find_if(ls.begin(), ls.end(), [&](const auto& l) { return l["class_name"] == cls; }) - ls.begin();
  };
  const auto tensor = [](const std::string& layer) {
    return nlohmann::json{{"class_name", "__keras_tensor__"}, {"config", {{"keras_history", {layer, 0, 0}}}}};
  };
  const std::string input = j["config"]["layers"][0]["name"], dense = j["config"]["layers"][at("Dense")]["name"];
  const auto with_or = [&](const nlohmann::json& second) {
    auto c = j;
    auto& ls = c["config"]["layers"];
    ls[at("GlobalAveragePooling1D")]["inbound_nodes"][0]["kwargs"] = {{"mask", tensor("logical_or")}};
    const nlohmann::json not_equal{{"class_name", "NotEqual"},
                                   {"name", "not_equal"},
                                   {"inbound_nodes", {{{"args", {tensor(input), 0}}, {"kwargs", nlohmann::json::object()}}}}};
    const nlohmann::json logical_or{
        {"class_name", "LogicalOr"},
        {"name", "logical_or"},
        {"inbound_nodes", {{{"args", {tensor("not_equal"), second}}, {"kwargs", nlohmann::json::object()}}}}};
    ls.insert(ls.begin() + at("GlobalAveragePooling1D"), {not_equal, logical_or});
    config.bytes = c.dump();
    io::write_file_atomic(dir + "/or2.keras", io::encode_zip(entries));
    try {
      const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 0, 0, 0, 3, 4, 5, 6, 0}, Shape{2, 5});
      EXPECT_TRUE(same_bits(load_model(dir + "/or2.keras")->predict(x), model.predict(x)));
      return std::string();
    } catch (const IOError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(with_or(tensor("not_equal")), "");
  const std::string not_mask = with_or(tensor(dense));
  EXPECT_NE(not_mask.find("or2.keras': 'logical_or' (LogicalOr) is read as a record of a mask, logical_or(mask, mask)"),
            std::string::npos)
      << not_mask;
  const std::string not_tensor = with_or("not_equal");
  EXPECT_NE(not_tensor.find("layer 'logical_or': an argument is not a symbolic tensor"), std::string::npos)
      << not_tensor;
}
}  // namespace
}  // namespace lockstep
