// Keras 3's masks beyond Embedding(mask_zero): the Masking layer (keras/src/layers/core/
// masking.py), Softmax's mask (layers/activations/softmax.py: the input's, or the call's own
// mask=), Concatenate's mask (layers/merging/concatenate.py), and the records of masks Keras
// writes into a Functional model's .keras file for them (NotEqual, Any, ExpandDims, ZerosLike,
// OnesLike, LogicalOr and the Concatenate op): values by hand, masks carried on, files both
// ways, and the errors a user meets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/error_message.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/tensor/kernel_launches.hpp"

namespace lockstep {
namespace {
using test::message_of;

Tensor vec(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }
std::vector<std::uint8_t> bytes(const Tensor& t) { return cast(t, DType::kU8).to_vector<std::uint8_t>(); }
void expect_near(const Tensor& t, const std::vector<float>& want, float tol = 1e-6f) {
  const auto got = t.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}
std::string tmp_dir() {
  const auto dir = (std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "mask_layers").string();
  std::filesystem::create_directories(dir);
  return dir;
}
#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Two examples of 3 steps of 2 features: row 0's middle step and row 1's last are all zeros; row
// 1's first two steps are all 5s.
Tensor steps() { return vec({1, 2, 0, 0, 0, 3, 5, 5, 5, 5, 0, 0}, {2, 3, 2}); }

TEST(MaskingLayer, MasksTheStepsWhoseFeaturesAllEqualTheMaskValueAndZeroesThem) {
  const auto zero = layers::Masking();
  EXPECT_EQ(bytes(zero->compute_mask(steps(), Tensor())), (std::vector<std::uint8_t>{1, 0, 1, 1, 1, 0}));
  expect_near(zero->call(steps(), {}), {1, 2, 0, 0, 0, 3, 5, 5, 5, 5, 0, 0});
  const auto five = layers::Masking(5.0f);
  // Its mask replaces the input's (Keras' compute_mask ignores the previous mask).
  const Tensor none_kept = Tensor::zeros(Shape{2, 3}, DType::kU8);
  EXPECT_EQ(bytes(five->compute_mask(steps(), none_kept)), (std::vector<std::uint8_t>{1, 1, 1, 0, 0, 1}));
  expect_near(five->call(steps(), {}), {1, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0});
  // A step with one feature equal to mask_value is kept.
  EXPECT_EQ(bytes(five->compute_mask(vec({5, 1}, {1, 1, 2}), Tensor())), (std::vector<std::uint8_t>{1}));

  EXPECT_VALUE_ERROR(layers::Masking(INFINITY), "Masking: mask_value inf is not finite");
  EXPECT_VALUE_ERROR(layers::Masking(NAN), "is not finite");
  auto named = layers::Masking();
  named->set_name("pad");
  EXPECT_VALUE_ERROR(named->compute_output_shape(Shape{-1}), "layer 'pad' (Masking) takes inputs (batch, ..., features)");
}

// Masking -> Dense -> GlobalAveragePooling1D: Dense carries the mask, the pooling averages the
// kept steps, in a Sequential and in a Functional model; a sequence output keeps the mask for its
// loss (Model::Output::mask).
TEST(MaskingLayer, ItsMaskReachesThePoolingAndTheOutputInBothModelKinds) {
  const auto identity = [](const Model& m) {
    for (const auto& v : m.variables())
      if (v.value().shape() == Shape{2, 2}) v.assign(vec({1, 0, 0, 1}, {2, 2}));
  };
  // Row 0 keeps steps 0 and 2: mean (0.5, 2.5); row 1 keeps steps 0 and 1: (5, 5).
  const std::vector<float> want{0.5f, 2.5f, 5, 5};
  Sequential seq({layers::Input({3, 2}), layers::Masking(), layers::Dense({.units = 2, .use_bias = false}),
                  layers::GlobalAveragePooling1D()});
  identity(seq);
  expect_near(seq.predict(steps()), want, 1e-6f);

  const KerasTensor in = Input({3, 2});
  const KerasTensor masked = call(layers::Masking(), in);
  Functional fun(in, call(layers::GlobalAveragePooling1D(), call(layers::Dense({.units = 2, .use_bias = false}), masked)));
  identity(fun);
  expect_near(fun.predict(steps()), want, 1e-6f);

  Sequential tagger({layers::Input({3, 2}), layers::Masking(5.0f), layers::Dense(3, "softmax")});
  const Model::Output out = tagger.forward(steps(), {});
  ASSERT_TRUE(out.mask.defined());
  EXPECT_EQ(bytes(out.mask), (std::vector<std::uint8_t>{1, 1, 1, 0, 0, 1}));
}

// A model computes Masking's mask before the call (compute_mask, for the next layer), and the call
// zeroes the steps by that mask: one comparison of every feature per call, as Keras' Masking.call,
// counted by the mask's one reduce_max kernel (the max over the features of x != mask_value).
TEST(MaskingLayer, AModelComparesTheFeaturesOncePerCall) {
  const auto reduce_maxes = [] { return detail::kernel_launches(Device{}, "reduce_max"); };
  const auto forward_once = [&](const Model& model) {
    const std::uint64_t before = reduce_maxes();
    const Model::Output out = model.forward(steps(), {});
    EXPECT_EQ(reduce_maxes() - before, 1u) << model.name();
    return out;
  };
  const std::vector<float> zeroed{1, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0};
  const std::vector<std::uint8_t> kept{1, 1, 1, 0, 0, 1};
  Sequential seq({layers::Input({3, 2}), layers::Masking(5.0f), layers::Dense({.units = 2, .use_bias = false})}, "seq");
  for (const auto& v : seq.variables()) v.assign(vec({1, 0, 0, 1}, {2, 2}));
  Model::Output out = forward_once(seq);
  expect_near(out.output, zeroed);
  EXPECT_EQ(bytes(out.mask), kept);

  const KerasTensor in = Input({3, 2});
  Functional fun(in, call(layers::Masking(5.0f), in), "fun");  // Masking the output node
  out = forward_once(fun);
  expect_near(out.output, zeroed);
  EXPECT_EQ(bytes(out.mask), kept);

  const std::uint64_t before = reduce_maxes();
  expect_near(layers::Masking(5.0f)->call(steps(), {}), zeroed);
  EXPECT_EQ(reduce_maxes() - before, 1u) << "a call of its own";
}

// Masking as the output layer, no mask before it: the output carries Masking's mask in a
// Sequential as in a Functional (Keras' Layer.__call__ sets every call's output mask), so the loss
// and the metric weigh the kept steps only. Dense(2, no bias) -> Masking(0): a step of zeros stays
// zero, so steps() masks the same steps as the kernel trains. The numbers are Keras 3.15.1's
// (TensorFlow backend), computed once with this script and written here:
//   m = Sequential([Input((3, 2)), Dense(2, use_bias=False), Masking(0.0)])  # or the Functional
//   m.layers[0].set_weights([[[1, .5], [-.5, 1]]]); m.compile(optimizer=SGD(0.01), loss="mse", metrics=["mae"])
//   m.evaluate(x, y, batch_size=2); m.fit(x, y, epochs=2, batch_size=2, shuffle=False); m.evaluate(x, y, batch_size=2)
// with x = steps() and y below; over every step (no mask) the first loss would be 17.0625, mae 3.375.
TEST(MaskingLayer, AsTheOutputLayerItsMaskWeighsTheLossAndMetricsInBothModelKinds) {
  const Tensor y = vec({0.5f, 1, 3, -2, 1, 1, 2, 0, -1, 4, 7, 7}, {2, 3, 2});
  const auto trained = [&](Model& m) {
    for (const auto& v : m.variables()) v.assign(vec({1, 0.5f, -0.5f, 1}, {2, 2}));
    m.compile(optimizers::SGD(0.01), losses::MeanSquaredError(), {"mae"});
    const Model::Output out = m.forward(steps(), {});
    EXPECT_TRUE(out.mask.defined()) << m.name();
    if (out.mask.defined()) {
      EXPECT_EQ(bytes(out.mask), (std::vector<std::uint8_t>{1, 0, 1, 1, 1, 0})) << m.name();
    }
    const Logs before = m.evaluate(steps(), y, {.batch_size = 2});
    EXPECT_NEAR(before.at("loss"), 11.71875, 1e-5) << m.name();
    EXPECT_NEAR(before.at("mae"), 2.6875, 1e-6) << m.name();
    const History h = m.fit(steps(), y, {.epochs = 2, .batch_size = 2, .shuffle = false, .verbose = 0});
    EXPECT_NEAR(h.history.at("loss")[1], 7.505753040313721, 1e-5) << m.name();
    EXPECT_NEAR(h.history.at("mae")[1], 2.1204686164855957, 1e-6) << m.name();
    return m.evaluate(steps(), y, {.batch_size = 2});
  };
  Sequential seq({layers::Input({3, 2}), layers::Dense({.units = 2, .use_bias = false}), layers::Masking()}, "seq");
  const KerasTensor in = Input({3, 2});
  Functional fun(in, call(layers::Masking(), call(layers::Dense({.units = 2, .use_bias = false}), in)), "fun");
  const Logs a = trained(seq), b = trained(fun);
  EXPECT_NEAR(a.at("loss"), 5.267935276031494, 1e-5);
  EXPECT_NEAR(a.at("mae"), 1.7491950988769531, 1e-6);
  EXPECT_EQ(a, b) << "the same layers, the same weights: the same numbers";
}

TEST(MaskingLayer, ItsConfigRoundTripsThroughTheRegistryAndBothFileFormats) {
  const auto m = std::make_shared<layers::MaskingLayer>(0.25f, "pad");
  const nlohmann::json c = m->get_config();
  EXPECT_EQ(c.at("mask_value"), 0.25);
  const auto cls = layers::find_layer_class("Masking");
  ASSERT_TRUE(cls);
  const auto again = std::dynamic_pointer_cast<layers::MaskingLayer>(cls->from_config(c));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->mask_value(), 0.25f);
  EXPECT_EQ(again->name(), "pad");
  EXPECT_VALUE_ERROR(cls->from_config({{"name", "m"}, {"mask_value", "zero"}}), "Masking: argument mask_value=\"zero\" must be a finite number");

  set_random_seed(2);
  const Tensor x = vec({0.25f, 0.25f, 1, 2, 0.25f, 0, 0.25f, 0.25f, 3, 4, 0.25f, 0.25f}, {2, 3, 2});
  const KerasTensor in = Input({3, 2});
  const KerasTensor h = call(layers::Dense(4, "relu"), call(m, in));
  Functional fun(in, call(layers::Dense(2), call(layers::GlobalAveragePooling1D(), h)), "masked");
  Sequential seq({layers::Input({3, 2}), layers::Masking(0.25f), layers::Dense(4, "relu"), layers::GlobalAveragePooling1D(),
                  layers::Dense(2)});
  for (Model* model : std::initializer_list<Model*>{&fun, &seq})
    for (const std::string file : {"/masking.keras", "/masking_folder"}) {
      const std::string path = tmp_dir() + "/" + model->name() + "_" + file.substr(1);
      std::filesystem::remove_all(path);
      save_model(*model, path);
      const auto loaded = load_model(path);
      EXPECT_TRUE(same_bits(loaded->predict(x), model->predict(x))) << file;
      const auto it = std::find_if(loaded->layers().begin(), loaded->layers().end(),
                                   [](const auto& l) { return l->class_name() == "Masking"; });
      ASSERT_NE(it, loaded->layers().end());
      EXPECT_EQ(std::dynamic_pointer_cast<layers::MaskingLayer>(*it)->mask_value(), 0.25f);
    }
}

// Softmax(x, mask=m): Keras' masked softmax on the kept positions, masked ones 0, a row masked
// whole all zeros; a floating mask keeps what is above 0.5; the mask broadcasts from the last axis.
TEST(MaskedSoftmax, KeepsThePositionsTheMaskKeepsAsKerasDoes) {
  const KerasTensor x = Input({4}, "x"), m = Input({4}, "m");
  const KerasTensor y = call(layers::Softmax(), x, CallKwargs{.mask = &m});
  Functional model({x, m}, y);
  const Tensor scores = vec({1, 2, 3, 4, 1, 2, 3, 4}, {2, 4});
  const Tensor mask = vec({1, 0.6f, 0.4f, 1, 0, 0, 0, 0}, {2, 4});
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(4.0);
  expect_near(model.predict(std::vector<Tensor>{scores, mask}).front(),
              {static_cast<float>(std::exp(1.0) / z), static_cast<float>(std::exp(2.0) / z), 0,
               static_cast<float>(std::exp(4.0) / z), 0, 0, 0, 0});
  // The output keeps the call's mask (Keras' previous_mask).
  const auto outs = model.forward_all(std::vector<Tensor>{scores, mask}, {});
  ASSERT_TRUE(outs.front().mask.defined());
  EXPECT_TRUE(same_bits(outs.front().mask, mask));

  // A mask (batch, 1, 3) on (batch, 2, 3): each step's scores under the example's one mask.
  const KerasTensor x3 = Input({2, 3}), m3 = Input({1, 3});
  Functional broadcast({x3, m3}, call(layers::Softmax(), x3, CallKwargs{.mask = &m3}));
  const Tensor y3 = broadcast.predict(std::vector<Tensor>{vec({0, 0, 5, 1, 1, 1}, {1, 2, 3}),
                                                          vec({1, 1, 0}, {1, 1, 3})}).front();
  expect_near(y3, {0.5f, 0.5f, 0, 0.5f, 0.5f, 0});
}

// Keras' where(mask, x, large_negative): a score the mask leaves out never reaches the output, an
// infinity or NaN there included (a scores tensor already filled with -inf where padded).
TEST(MaskedSoftmax, AnInfiniteOrNaNScoreTheMaskLeavesOutDoesNotReachTheOutput) {
  const KerasTensor x = Input({4}, "x"), m = Input({4}, "m");
  Functional model({x, m}, call(layers::Softmax(), x, CallKwargs{.mask = &m}));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor scores = vec({0, -inf, std::log(3.0f), nan, inf, 1, 1, -inf}, {2, 4});
  const Tensor mask = vec({1, 0, 1, 0, 0, 1, 1, 0}, {2, 4});
  expect_near(model.predict(std::vector<Tensor>{scores, mask}).front(), {0.25f, 0, 0.75f, 0, 0, 0.5f, 0.5f, 0});
}

TEST(MaskedSoftmax, AMaskTheCallCannotTakeIsAValueErrorNamingTheLayer) {
  const KerasTensor x = Input({4, 5});
  const KerasTensor wrong = Input({3, 5}), deeper = Input({2, 4, 5}), steps_only = Input({4});
  auto softmax = layers::Softmax();
  softmax->set_name("attn");
  EXPECT_VALUE_ERROR(call(softmax, x, CallKwargs{.mask = &wrong}),
                     "layer 'attn' (Softmax): the mask must be broadcastable to the inputs");
  EXPECT_VALUE_ERROR(call(softmax, x, CallKwargs{.mask = &deeper}), "got inputs (None, 4, 5) and a mask (None, 2, 4, 5)");
  // [batch, steps] against [batch, steps, features]: Keras' rule compares the steps with the features.
  EXPECT_VALUE_ERROR(call(softmax, x, CallKwargs{.mask = &steps_only}), "must be broadcastable");
  EXPECT_VALUE_ERROR(call(layers::Dense(2), x, CallKwargs{.mask = &wrong}),
                     "takes no mask (Softmax and GlobalAveragePooling1D do)");
  // GlobalAveragePooling1D takes a mask of its input's steps.
  EXPECT_VALUE_ERROR(call(layers::GlobalAveragePooling1D(), x, CallKwargs{.mask = &wrong}),
                     "a mask must mark the steps of its input (None, 4, 5)");
  EXPECT_EQ(call(layers::GlobalAveragePooling1D(), x, CallKwargs{.mask = &steps_only}).shape(), (Shape{-1, 5}));
}

// An Embedding(mask_zero)'s mask reaches a Softmax after it as Keras passes it, and as in Keras
// it does not fit the embeddings: predict is Keras' ValueError, in both model kinds.
TEST(MaskedSoftmax, AnEmbeddingsMaskIsPassedOnAndRefusedAsKerasRefusesIt) {
  const Tensor ids = vec({1, 2, 0, 0, 3, 0, 0, 0}, {2, 4});
  Sequential seq({layers::Input({4}), layers::Embedding(10, 3, true), layers::Softmax()});
  EXPECT_VALUE_ERROR(seq.predict(ids), "(Softmax): the mask must be broadcastable to the inputs");
  const KerasTensor in = Input({4});
  Functional fun(in, call(layers::Softmax(), call(layers::Embedding(10, 3, true), in)));
  EXPECT_VALUE_ERROR(fun.predict(ids), "got inputs (2, 4, 3) and a mask (2, 4)");
  // Without mask_zero there is no mask and nothing to refuse.
  Sequential plain({layers::Input({4}), layers::Embedding(10, 3), layers::Softmax()});
  EXPECT_EQ(plain.predict(ids).shape(), (Shape{2, 4, 3}));
}

TEST(MaskedSoftmax, TheCallsMaskIsSavedAsKerasWritesItAndLoadsBack) {
  const KerasTensor x = Input({2, 3}, "x"), m = Input({1, 3}, "m");
  const KerasTensor s = call(layers::Softmax(), call(layers::Dense(3), x), CallKwargs{.mask = &m});
  Functional model({x, m}, call(layers::Dense(2), s), "masked_softmax");
  const std::vector<Tensor> xs{vec({1, 2, 3, 4, 5, 6, 1, 1, 2, 0, 3, 1}, {2, 2, 3}), vec({1, 0, 1, 0, 1, 1}, {2, 1, 3})};
  for (const char* file : {"/masked_softmax.keras", "/masked_softmax_folder"}) {
    std::filesystem::remove_all(tmp_dir() + file);
    save_model(model, tmp_dir() + file);
    const auto loaded = load_model(tmp_dir() + file);
    EXPECT_TRUE(same_bits(loaded->predict(xs).front(), model.predict(xs).front())) << file;
  }
  // Called as a model inside a model, its calls are replayed with their masks.
  const KerasTensor x2 = Input({2, 3}), m2 = Input({1, 3});
  Functional outer({x2, m2}, call(model, {x2, m2}).front(), "outer");
  EXPECT_TRUE(same_bits(outer.predict(xs).front(), model.predict(xs).front()));
  auto entries = io::decode_zip(io::read_file(tmp_dir() + "/masked_softmax.keras"), "masked_softmax.keras");
  const auto config = std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.name == "config.json"; });
  const auto j = nlohmann::json::parse(config->bytes);
  const auto& ls = j.at("config").at("layers");
  const auto softmax = std::find_if(ls.begin(), ls.end(), [](const auto& l) { return l.at("class_name") == "Softmax"; });
  ASSERT_NE(softmax, ls.end());
  EXPECT_EQ(softmax->at("inbound_nodes").at(0).at("kwargs").at("mask").at("config").at("keras_history"),
            nlohmann::json::parse(R"(["m", 0, 0])"));
}

TEST(ConcatenateMask, IsKeras3sAlongTheFeaturesAndAlongTheSteps) {
  const Tensor xs = Tensor::zeros(Shape{1, 4, 2});
  const Tensor m1 = Tensor::from_vector(std::vector<std::uint8_t>{1, 1, 0, 0}, Shape{1, 4});
  const Tensor m2 = Tensor::from_vector(std::vector<std::uint8_t>{0, 1, 1, 0}, Shape{1, 4});
  const auto last = std::dynamic_pointer_cast<layers::MergeLayer>(layers::Concatenate());
  ASSERT_TRUE(last);
  EXPECT_EQ(bytes(last->merge_mask({xs, xs}, {m1, m2})), (std::vector<std::uint8_t>{1, 1, 1, 0}));
  // An unmasked input keeps every step: a mask of ones (Keras' ones_like), not none.
  const Tensor ones = last->merge_mask({xs, xs}, {m1, Tensor()});
  ASSERT_TRUE(ones.defined());
  EXPECT_EQ(ones.shape(), (Shape{1, 4}));
  EXPECT_EQ(bytes(ones), (std::vector<std::uint8_t>{1, 1, 1, 1}));
  EXPECT_FALSE(last->merge_mask({xs, xs}, {Tensor(), Tensor()}).defined());
  const auto steps = std::dynamic_pointer_cast<layers::MergeLayer>(layers::Concatenate(1));
  EXPECT_EQ(bytes(steps->merge_mask({xs, Tensor::zeros(Shape{1, 2, 2})}, {m1, Tensor()})),
            (std::vector<std::uint8_t>{1, 1, 0, 0, 1, 1}));
  EXPECT_VALUE_ERROR(steps->merge_mask({xs, xs}, {m1, Tensor::ones(Shape{1, 3}, DType::kU8)}),
                     "(Concatenate): a mask (1, 3) does not match the steps of input (1, 4, 2)");
}

// A Functional model as Keras writes it: Embedding(mask_zero) and a plain Embedding of one input,
// concatenated along the features, pooled with the concatenation's mask, which Keras records as
// not_equal, expand_dims, zeros_like, logical_or, ones_like, concatenate and any nodes handed to
// the pooling as its mask keyword. It loads and predicts as the model; any other op, or one of
// these in another form, is an IOError naming it.
TEST(KerasMaskRecords, AConcatenationsMaskLoadsAndAnyOtherOpIsNamed) {
  set_random_seed(6);
  const KerasTensor in = Input({5}, "ids");
  auto masked = layers::Embedding(7, 2, true), plain = layers::Embedding(7, 3);
  masked->set_name("masked");
  plain->set_name("plain");
  const KerasTensor e1 = call(masked, in), e2 = call(plain, in);
  auto cat = layers::Concatenate(), pool = layers::GlobalAveragePooling1D();
  cat->set_name("cat");
  pool->set_name("pool");
  Functional model(in, call(layers::Dense(2), call(pool, call(cat, {e1, e2}))), "cat_masks");
  save_model(model, tmp_dir() + "/cat.keras");
  auto entries = io::decode_zip(io::read_file(tmp_dir() + "/cat.keras"), "cat.keras");
  auto& config = *std::find_if(entries.begin(), entries.end(), [](const auto& e) { return e.name == "config.json"; });
  const auto j = nlohmann::json::parse(config.bytes);
  const auto tensor = [](const std::string& layer) {
    return nlohmann::json{{"class_name", "__keras_tensor__"}, {"config", {{"keras_history", {layer, 0, 0}}}}};
  };
  const auto op = [](const std::string& cls, const std::string& name, const nlohmann::json& args,
                     const nlohmann::json& config) {
    return nlohmann::json{{"module", "keras.src.ops.numpy"}, {"class_name", cls}, {"name", name},
                          {"config", config}, {"inbound_nodes", {{{"args", args}, {"kwargs", nlohmann::json::object()}}}}};
  };
  const auto records = [&] {
    return std::vector<nlohmann::json>{
        op("NotEqual", "not_equal", {tensor("ids"), 0}, {{"name", "not_equal"}}),
        op("ExpandDims", "expand_dims", nlohmann::json::array({tensor("not_equal")}), {{"axis", -1}}),
        op("ZerosLike", "zeros_like", nlohmann::json::array({tensor("masked")}), nlohmann::json::object()),
        op("LogicalOr", "logical_or", {tensor("expand_dims"), tensor("zeros_like")}, nlohmann::json::object()),
        op("OnesLike", "ones_like", nlohmann::json::array({tensor("plain")}), nlohmann::json::object()),
        op("Concatenate", "concatenate", {{tensor("logical_or"), tensor("ones_like")}}, {{"axis", -1}}),
        op("Any", "any", nlohmann::json::array({tensor("concatenate")}), {{"axis", -1}, {"keepdims", false}})};
  };
  const Tensor x = vec({1, 2, 0, 0, 0, 3, 4, 5, 6, 0}, {2, 5});
  const auto load = [&](const std::vector<nlohmann::json>& ops) {
    nlohmann::json c = j, layers_list = nlohmann::json::array();
    for (nlohmann::json l : j.at("config").at("layers")) {
      if (l.at("name") == "pool") {
        for (const auto& o : ops) layers_list.push_back(o);
        l.at("inbound_nodes").at(0).at("kwargs") = nlohmann::json{{"mask", tensor("any")}};
      }
      layers_list.push_back(std::move(l));
    }
    c.at("config").at("layers") = std::move(layers_list);
    config.bytes = c.dump();
    io::write_file_atomic(tmp_dir() + "/cat2.keras", io::encode_zip(entries));
    return load_model(tmp_dir() + "/cat2.keras");
  };
  EXPECT_TRUE(same_bits(load(records())->predict(x), model.predict(x)));

  auto other = records();
  other.insert(other.end() - 1, op("Squeeze", "squeeze", nlohmann::json::array({tensor("concatenate")}), {{"axis", 0}}));
  EXPECT_HAS(test::io_message_of([&] { load(other); }),
             "'squeeze' (Squeeze) is an op of keras.src.ops.numpy; lockstep reads ops only as Keras' records of masks");
  auto axis = records();
  axis.back()["config"]["axis"] = 1;
  EXPECT_HAS(test::io_message_of([&] { load(axis); }),
             "'any' (Any) is read as a record of a mask, any(mask, axis=-1, keepdims=False), but it is");
  auto computed = records();
  computed.front()["inbound_nodes"][0]["args"][1] = 3;
  EXPECT_HAS(test::io_message_of([&] { load(computed); }),
             "'not_equal' (NotEqual) is not_equal(x, 3) of a tensor that no Embedding(mask_zero=True) or "
             "Masking(mask_value=3) is called on");
  auto not_a_mask = records();
  not_a_mask[5]["inbound_nodes"][0]["args"][0][1] = tensor("plain");
  EXPECT_HAS(test::io_message_of([&] { load(not_a_mask); }), "'concatenate' (Concatenate) is read as a record of a mask");
}

}  // namespace
}  // namespace lockstep
