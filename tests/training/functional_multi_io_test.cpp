// Functional models of several inputs and outputs (Keras' keras.Model(inputs=[a, b], outputs={"cls":
// c, "reg": d})): an image + tabular -> class + regression model trains with per-output losses,
// loss_weights and metrics, logged under Keras 3's names; "loss" is the weighted sum of the
// outputs' losses; bad structures are ValueErrors naming what is wrong; .keras files round-trip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error_message.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/tensor/kernel_launches.hpp"

namespace lockstep {
namespace {
using test::message_of;

layers::LayerPtr named(layers::LayerPtr l, const std::string& name) {
  l->set_name(name);
  return l;
}

// Image (6x6x1) + tabular (3) -> "cls" (3 classes, softmax) and "reg" (1 value).
struct TwoByTwo {
  KerasTensor image = Input({6, 6, 1}, "image");
  KerasTensor tab = Input({3}, "tab");
  KerasTensor cls, reg;
  TwoByTwo() {
    const KerasTensor flat = call(layers::Flatten(), image);
    const KerasTensor both = call(layers::Concatenate(), {flat, tab});
    const KerasTensor h = call(layers::Dense(32, "relu"), both);
    cls = call(named(layers::Dense(3, "softmax"), "cls"), h);
    reg = call(named(layers::Dense(1), "reg"), h);
  }
};

// The class is the largest tabular feature; the regression target is the image's mean.
struct Data {
  Tensor image, tab, cls, reg;
};
Data make_data(std::int64_t n) {
  std::vector<float> img(static_cast<std::size_t>(n * 36)), tab(static_cast<std::size_t>(n * 3)), reg;
  std::vector<std::int64_t> cls;
  std::uint64_t s = 12345;
  const auto next = [&] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((s >> 40) % 1000) / 1000.0f;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    float mean = 0;
    for (int j = 0; j < 36; ++j) mean += (img[static_cast<std::size_t>(i * 36 + j)] = next()) / 36.0f;
    int best = 0;
    for (int j = 0; j < 3; ++j) {
      tab[static_cast<std::size_t>(i * 3 + j)] = next();
      if (tab[static_cast<std::size_t>(i * 3 + j)] > tab[static_cast<std::size_t>(i * 3 + best)]) best = j;
    }
    cls.push_back(best);
    reg.push_back(4.0f * mean);
  }
  return {Tensor::from_vector(img, {n, 6, 6, 1}), Tensor::from_vector(tab, {n, 3}), Tensor::from_vector(cls, {n}),
          Tensor::from_vector(reg, {n, 1})};
}

void compile_two_by_two(Model& m) {
  m.compile(optimizers::Adam(0.01),
            {{"cls", losses::SparseCategoricalCrossentropy()}, {"reg", losses::MeanSquaredError()}},
            {{"cls", {"accuracy"}}, {"reg", {"mae"}}}, {{"cls", 1.0}, {"reg", 0.5}});
}

TEST(FunctionalMultiIO, TrainsWithPerOutputLossesAndKerasLogNames) {
  TwoByTwo g;
  Functional model({g.image, g.tab}, {g.cls, g.reg}, "two_by_two", 7);
  EXPECT_EQ(model.input_structure().names, (std::vector<std::string>{"image", "tab"}));
  EXPECT_EQ(model.output_structure().names, (std::vector<std::string>{"cls", "reg"}));
  compile_two_by_two(model);
  const Data d = make_data(1024);
  FitOptions o;
  o.epochs = 12;
  o.batch_size = 32;
  o.verbose = 0;
  o.validation_split = 0.25;
  const History h = model.fit({d.image, d.tab}, {d.cls, d.reg}, o);
  std::set<std::string> keys;
  for (const auto& [k, v] : h.history)
    if (k.find("seconds") == std::string::npos && k.find("per_second") == std::string::npos &&
        k.find("memory") == std::string::npos)
      keys.insert(k);
  // Keras 3's names (checked against TF 2.21 / Keras 3 fitting the same structure).
  for (const char* k : {"loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae", "val_loss", "val_cls_loss",
                        "val_reg_loss", "val_cls_accuracy", "val_reg_mae"})
    EXPECT_TRUE(keys.count(k)) << "history lacks " << k;
  EXPECT_FALSE(keys.count("accuracy"));
  // It learned both heads.
  EXPECT_GT(h.history.at("val_cls_accuracy").back(), 0.8);
  EXPECT_LT(h.history.at("val_reg_mae").back(), h.history.at("val_reg_mae").front());
  EXPECT_LT(h.history.at("val_reg_mae").back(), 0.15);

  // "loss" is the weighted sum of the outputs' losses.
  const Logs logs = model.evaluate({d.image, d.tab}, {d.cls, d.reg});
  EXPECT_NEAR(logs.at("loss"), logs.at("cls_loss") + 0.5 * logs.at("reg_loss"), 1e-5 * logs.at("loss"));
  for (int e = 0; e < 12; ++e)
    EXPECT_NEAR(h.history.at("loss")[e], h.history.at("cls_loss")[e] + 0.5 * h.history.at("reg_loss")[e],
                1e-4 * h.history.at("loss")[e]);

  // predict: one tensor per output, the rows of every input in order.
  const std::vector<Tensor> p = model.predict({d.image, d.tab});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].shape(), (Shape{1024, 3}));
  EXPECT_EQ(p[1].shape(), (Shape{1024, 1}));
}

TEST(FunctionalMultiIO, DictsAreFlatInKeyOrderAndOneLossServesEveryOutput) {
  TwoByTwo g;
  // Keras flattens a dict in its keys' sorted order: "tab" after "image", "a_reg" before "b_cls".
  Functional model({{"tab", g.tab}, {"image", g.image}}, {{"b_cls", g.cls}, {"a_reg", g.reg}}, "dicts", 3);
  EXPECT_EQ(model.input_structure().form, Structure::Form::kDict);
  EXPECT_EQ(model.input_structure().names, (std::vector<std::string>{"image", "tab"}));
  EXPECT_EQ(model.output_structure().names, (std::vector<std::string>{"a_reg", "b_cls"}));
  model.compile(optimizers::SGD(0.01), losses::MeanSquaredError());  // one loss for every output (Keras)
  const Data d = make_data(64);
  const Logs logs = model.evaluate({d.image, d.tab}, {d.reg, d.tab});  // a_reg, then b_cls (3 values)
  EXPECT_TRUE(logs.count("a_reg_loss") && logs.count("b_cls_loss")) << logs.size();
  EXPECT_NEAR(logs.at("loss"), logs.at("a_reg_loss") + logs.at("b_cls_loss"), 1e-5 * logs.at("loss"));
}

// Lists of one (keras.Model([a], [b])) train, log and predict as the model of one they are.
TEST(FunctionalMultiIO, ListsOfOneAreAModelOfOne) {
  const KerasTensor in = Input({3}, "features");
  Functional model({in}, {call(named(layers::Dense(1), "value"), in)}, "lists_of_one", 2);
  EXPECT_EQ(model.output_structure().form, Structure::Form::kList);
  model.compile(optimizers::SGD(0.1), losses::MeanSquaredError(), {"mae"});
  const Data d = make_data(32);
  const Logs logs = model.evaluate(d.tab, d.reg);
  EXPECT_EQ(logs.size(), 2u);
  EXPECT_TRUE(logs.count("loss") && logs.count("mae"));
  EXPECT_EQ(model.predict(d.tab).shape(), (Shape{32, 1}));
}

TEST(FunctionalMultiIO, BadStructuresAreValueErrorsNamingThem) {
  TwoByTwo g;
  Functional model({g.image, g.tab}, {g.cls, g.reg}, "bad", 1);
  const Data d = make_data(16);
  EXPECT_VALUE_ERROR(model.compile(optimizers::Adam(0.01), {{"cls", losses::SparseCategoricalCrossentropy()}}, {}),
                 "output 'reg' has no loss");
  EXPECT_VALUE_ERROR(model.compile(optimizers::Adam(0.01), {{"cls", losses::MeanSquaredError()}, {"rgr", losses::MeanSquaredError()}}, {}),
                 "'rgr' is not an output of the model; its outputs are: cls, reg");
  EXPECT_VALUE_ERROR(model.compile(optimizers::Adam(0.01), losses::MeanSquaredError(), {"mae"}),
                 "give metrics per output");
  compile_two_by_two(model);
  FitOptions o;
  o.verbose = 0;
  EXPECT_VALUE_ERROR(model.fit({d.image}, {d.cls, d.reg}, o), "takes 2 input(s) (image, tab), got 1");
  EXPECT_VALUE_ERROR(model.fit({d.image, d.tab}, {d.cls}, o), "has 2 output(s) (cls, reg), got 1 target");
  EXPECT_VALUE_ERROR(model.evaluate({d.image, d.image}, {d.cls, d.reg}), "input 'tab' expects shape (None, 3)");
  EXPECT_VALUE_ERROR(model.predict({d.image, d.tab.slice(0, 8)}), "input 'tab' (8, 3) and input 'image'");
  EXPECT_VALUE_ERROR(model.predict(d.image), "has 2 outputs (cls, reg)");
  // A dataset whose elements lack a target.
  EXPECT_VALUE_ERROR(model.fit(data::Dataset::from_tensor_slices({d.image, d.tab, d.cls}).batch(4), o),
                 "each element must hold 4 tensors (inputs image, tab, then targets cls, reg), got 3");
  const KerasTensor lone = Input({2}, "lone");
  EXPECT_VALUE_ERROR(Functional({g.image, g.tab, lone}, {g.cls, g.reg}, "unused"),
                 "the input layer 'lone' (InputLayer) is not used by any output");
  EXPECT_VALUE_ERROR(Functional(g.image, {g.cls, g.reg}, "missing"),
                 "it depends on layer 'tab' (InputLayer) of shape (None, 3), which is not the model's input");
  EXPECT_VALUE_ERROR(Functional({g.image, lone}, {g.cls, g.reg}, "missing"),
                 "which is not one of the model's inputs (layer 'image' (InputLayer) of shape (None, 6, 6, 1), layer "
                 "'lone' (InputLayer) of shape (None, 2))");
}

// Every input and target is split over the replicas by one rule: 2 replicas (and a batch of 9,
// split 5 + 4) train what one device does.
TEST(FunctionalMultiIO, TwoReplicasTrainWhatOneDeviceDoes) {
  const Data d = make_data(90);
  std::vector<std::vector<float>> weights[2];
  std::map<std::string, std::vector<double>> history[2];
  for (int replicas : {1, 2}) {
    distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
    auto scope = strategy.scope();
    TwoByTwo g;
    Functional model({g.image, g.tab}, {g.cls, g.reg}, "replicated", 11);
    compile_two_by_two(model);
    FitOptions o;
    o.epochs = 2;
    o.batch_size = 9;
    o.shuffle = false;
    o.verbose = 0;
    history[replicas - 1] = model.fit({d.image, d.tab}, {d.cls, d.reg}, o).history;
    strategy.check_mirrored(model.variables());
    for (const auto& v : model.variables()) weights[replicas - 1].push_back(v.value().to_vector<float>());
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (std::size_t i = 0; i < weights[0].size(); ++i)
    for (std::size_t j = 0; j < weights[0][i].size(); ++j) ASSERT_NEAR(weights[0][i][j], weights[1][i][j], 1e-4);
  for (const char* k : {"loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae"})
    EXPECT_NEAR(history[0].at(k).back(), history[1].at(k).back(), 1e-4 * (1 + std::abs(history[0].at(k).back()))) << k;
}

// Each output whose softmax no node reads leaves it to its loss, as a model of one output does:
// "cls"'s softmax and sparse cross-entropy run as one softmax_sparse_xent in the train and test
// steps. The reference is the same model with a third output, "echo", that reads "cls" (weighted
// 0): "cls"'s probabilities are then made by the forward as before and the loss reads its logits.
// Both train to the same losses, metrics and weights, bit for bit; predict returns probabilities.
TEST(FunctionalMultiIO, ASoftmaxOutputNoLayerReadsComputesItsSoftmaxWithItsLossAndTrainsTheSame) {
  const Data d = make_data(64);
  const Tensor zeros = Tensor::zeros({64, 3});
  TwoByTwo fg, ug;
  Functional fused({fg.image, fg.tab}, {fg.cls, fg.reg}, "fused", 7);
  const KerasTensor echo = call(named(layers::Activation("linear"), "echo"), ug.cls);
  Functional unfused({ug.image, ug.tab}, {ug.cls, ug.reg, echo}, "unfused", 7);
  const auto vf = fused.variables(), vu = unfused.variables();
  ASSERT_EQ(vf.size(), vu.size());
  for (std::size_t i = 0; i < vf.size(); ++i) vu[i].assign(vf[i].value());
  compile_two_by_two(fused);
  unfused.compile(optimizers::Adam(0.01),
                  {{"cls", losses::SparseCategoricalCrossentropy()},
                   {"reg", losses::MeanSquaredError()},
                   {"echo", losses::MeanSquaredError()}},
                  {{"cls", {"accuracy"}}, {"reg", {"mae"}}}, {{"cls", 1.0}, {"reg", 0.5}, {"echo", 0.0}});
  FitOptions o;
  o.epochs = 2;
  o.batch_size = 16;
  o.shuffle = false;
  o.verbose = 0;
  const auto count = [] {
    return std::map<std::string, std::uint64_t>{
        {"fused", detail::kernel_launches(Device{}, "softmax_sparse_xent")},
        {"softmax", detail::kernel_launches(Device{}, "softmax")},
        {"loss", detail::kernel_launches(Device{}, "sparse_softmax_xent")}};
  };
  const auto fit_counting = [&](Model& m, const std::vector<Tensor>& ys, std::map<std::string, std::uint64_t>& n) {
    const auto before = count();
    const History h = m.fit({d.image, d.tab}, ys, o);
    const Logs logs = m.evaluate({d.image, d.tab}, ys, {.batch_size = 16});
    for (auto& [name, value] : count()) n[name] = value - before.at(name);
    return std::pair{h, logs};
  };
  std::map<std::string, std::uint64_t> nf, nu;
  const auto [hf, lf] = fit_counting(fused, {d.cls, d.reg}, nf);
  const auto [hu, lu] = fit_counting(unfused, {d.cls, d.reg, zeros}, nu);
  // 8 train steps and 4 test steps: one kernel each for "cls"'s softmax and loss, or two.
  EXPECT_EQ(nf, (std::map<std::string, std::uint64_t>{{"fused", 12}, {"softmax", 0}, {"loss", 0}}));
  EXPECT_EQ(nu, (std::map<std::string, std::uint64_t>{{"fused", 0}, {"softmax", 12}, {"loss", 12}}));
  for (const char* k : {"loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae"}) {
    EXPECT_EQ(hf.history.at(k), hu.history.at(k)) << k;
    EXPECT_EQ(lf.at(k), lu.at(k)) << k;
  }
  for (std::size_t i = 0; i < vf.size(); ++i)
    EXPECT_EQ(vf[i].value().to_vector<float>(), vu[i].value().to_vector<float>()) << vf[i].name();
  // predict keeps each output's probabilities: rows summing to 1, the unfused model's bits.
  const std::vector<Tensor> pf = fused.predict({d.image, d.tab}), pu = unfused.predict({d.image, d.tab});
  ASSERT_EQ(pf[0].shape(), (Shape{64, 3}));
  EXPECT_EQ(pf[0].to_vector<float>(), pu[0].to_vector<float>());
  EXPECT_EQ(pu[2].to_vector<float>(), pu[0].to_vector<float>());
  const std::vector<float> p = pf[0].to_vector<float>();
  for (std::size_t r = 0; r < 64; ++r) {
    EXPECT_NEAR(p[3 * r] + p[3 * r + 1] + p[3 * r + 2], 1.0f, 1e-6f) << "row " << r;
    EXPECT_GE(*std::min_element(p.begin() + 3 * r, p.begin() + 3 * r + 3), 0.0f) << "row " << r;
  }
}

// MultiHeadAttention's call keywords (Keras' mha(x, x, use_causal_mask=True) and
// mha(y, y, attention_mask=mask), the mask a second input): the model computes what the layer's
// attend() does with them, and .keras files keep them.
TEST(FunctionalMultiIO, AttentionCallKeywordsRunAndRoundTrip) {
  const KerasTensor x = Input({5, 8}, "tokens");
  const KerasTensor mask = Input({5, 5}, "mask");
  const auto causal = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4});
  const auto masked = layers::MultiHeadAttention({.num_heads = 2, .key_dim = 3});
  const KerasTensor y = call(causal, {x, x}, {.use_causal_mask = true});
  const KerasTensor z = call(masked, {y, y}, {.attention_mask = &mask});
  Functional model({x, mask}, z, "attention_keywords", 9);
  std::vector<float> xv(2 * 5 * 8), mv(2 * 5 * 5);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>((i * 29) % 17) / 17.0f - 0.5f;
  for (std::size_t i = 0; i < mv.size(); ++i) mv[i] = (i % 3 == 1) ? 0.0f : 1.0f;
  const Tensor xt = Tensor::from_vector(xv, {2, 5, 8}), mt = Tensor::from_vector(mv, {2, 5, 5});
  const auto& c = dynamic_cast<const layers::MultiHeadAttentionLayer&>(*causal);
  const auto& m = dynamic_cast<const layers::MultiHeadAttentionLayer&>(*masked);
  const Tensor yt = c.attend(xt, xt, Tensor(), {}, {.use_causal_mask = true});
  const Tensor want = m.attend(yt, yt, Tensor(), {}, {.attention_mask = cast(mt, DType::kU8)});
  const std::vector<Tensor> got = model.predict({xt, mt});
  EXPECT_EQ(got[0].to_vector<float>(), want.to_vector<float>());
  // Without the keywords the result differs: they are not ignored.
  EXPECT_NE(m.attend(yt, yt, Tensor(), {}).to_vector<float>(), want.to_vector<float>());

  const auto dir = std::filesystem::temp_directory_path() / ("lockstep_mha_kw_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  save_model(model, (dir / "m.keras").string());
  const auto back = load_model((dir / "m.keras").string());
  EXPECT_EQ(back->predict({xt, mt})[0].to_vector<float>(), want.to_vector<float>());
  std::filesystem::remove_all(dir);

  EXPECT_VALUE_ERROR(call(layers::Add(), {x, x}, {.use_causal_mask = true}), "takes no use_causal_mask");
  const KerasTensor wrong = Input({5, 4});
  EXPECT_VALUE_ERROR(call(layers::MultiHeadAttention({.num_heads = 1, .key_dim = 2}), {x, x}, {.attention_mask = &wrong}),
                     "attention_mask must have shape (None, 5, 5) (batch, query length, value length), got (None, 5, 4)");
}

TEST(FunctionalMultiIO, KerasFileRoundTripPredictsTheSame) {
  TwoByTwo g;
  Functional model({{"image", g.image}, {"tab", g.tab}}, {{"cls", g.cls}, {"reg", g.reg}}, "saved", 5);
  compile_two_by_two(model);
  const Data d = make_data(40);
  const auto dir = std::filesystem::temp_directory_path() / ("lockstep_multiio_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.keras").string();
  save_model(model, path);
  const auto back = load_model(path);
  EXPECT_EQ(back->input_structure().form, Structure::Form::kDict);
  EXPECT_EQ(back->output_structure().names, (std::vector<std::string>{"cls", "reg"}));
  ASSERT_TRUE(back->compiled());
  ASSERT_EQ(back->output_losses().size(), 2u);
  EXPECT_EQ(back->output_losses()[1].weight, 0.5);
  const auto a = model.predict({d.image, d.tab});
  const auto b = back->predict({d.image, d.tab});
  for (int k = 0; k < 2; ++k) EXPECT_EQ(a[k].to_vector<float>(), b[k].to_vector<float>());
  const Logs la = model.evaluate({d.image, d.tab}, {d.cls, d.reg});
  const Logs lb = back->evaluate({d.image, d.tab}, {d.cls, d.reg});
  EXPECT_EQ(la, lb);
  // lockstep's own folder too: structure, per-output compile config and predictions.
  const std::string folder = (dir / "folder").string();
  save_model(model, folder);
  const auto again = load_model(folder);
  EXPECT_EQ(again->output_structure().names, (std::vector<std::string>{"cls", "reg"}));
  EXPECT_EQ(again->evaluate({d.image, d.tab}, {d.cls, d.reg}), la);
  std::filesystem::remove_all(dir);
}

// Metric objects per output (Keras' metrics={"cls": [keras.metrics.X(...)]}): logged as
// "<output>_<name>", listed in .keras compile configs unprefixed by output, as Keras lists them
// (a name where it makes the same metric, else Keras' object), and loaded back as the same
// metrics. Two metrics of one log name are refused.
TEST(FunctionalMultiIO, PerOutputMetricObjectsAreLoggedPrefixedAndKeptInKerasFiles) {
  TwoByTwo g;
  Functional model({{"image", g.image}, {"tab", g.tab}}, {{"cls", g.cls}, {"reg", g.reg}}, "objects", 5);
  const std::map<std::string, losses::LossPtr> losses = {{"cls", losses::SparseCategoricalCrossentropy()},
                                                         {"reg", losses::MeanSquaredError()}};
  model.compile(optimizers::Adam(0.01), losses,
                std::map<std::string, std::vector<metrics::MetricPtr>>{
                    {"cls",
                     {std::make_shared<metrics::SparseTopKCategoricalAccuracy>(2, "top2"),
                      metrics::get("accuracy", "sparse_categorical_crossentropy")}},
                    {"reg", {std::make_shared<metrics::MeanAbsoluteError>()}}});
  const Data d = make_data(40);
  const Logs logs = model.evaluate({d.image, d.tab}, {d.cls, d.reg});
  for (const char* k : {"cls_top2", "cls_accuracy", "reg_mean_absolute_error"}) EXPECT_TRUE(logs.contains(k)) << k;
  const auto dir = std::filesystem::temp_directory_path() / ("lockstep_multiio_m_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.keras").string();
  save_model(model, path);
  const nlohmann::json config =
      nlohmann::json::parse(io::find_entry(io::decode_zip(io::read_file(path), "m"), "config.json")->bytes);
  const nlohmann::json listed = config.at("compile_config").at("metrics");
  EXPECT_EQ(listed.at("cls").at(0), metrics::serialize(metrics::SparseTopKCategoricalAccuracy(2, "top2")));
  EXPECT_EQ(listed.at("cls").at(1), "accuracy");
  EXPECT_EQ(listed.at("reg"), nlohmann::json::array({"mean_absolute_error"}));
  save_model(model, (dir / "folder").string());  // lockstep's own folder lists them alike
  for (const std::string& saved : {path, (dir / "folder").string()}) {
    SCOPED_TRACE(saved);
    const auto back = load_model(saved);
    ASSERT_TRUE(back->compiled());
    ASSERT_EQ(back->metrics().size(), 3u);
    EXPECT_EQ(dynamic_cast<const metrics::SparseTopKCategoricalAccuracy&>(*back->metrics()[0].metric).k(), 2);
    EXPECT_EQ(back->metrics()[1].metric->class_name(), "SparseCategoricalAccuracy");
    EXPECT_EQ(back->evaluate({d.image, d.tab}, {d.cls, d.reg}), logs);
  }
  std::filesystem::remove_all(dir);
  EXPECT_VALUE_ERROR(model.compile(optimizers::Adam(0.01), losses,
                                   std::map<std::string, std::vector<metrics::MetricPtr>>{
                                       {"cls", {metrics::get("mae", ""), metrics::get("mae", "")}}}),
                     "two metrics are logged as 'cls_mae'");
}

// Keras prefixes the log, not the object: a user's metric keeps its name, so compiling again with
// the same objects (keras.io's fine-tuning recompiles) logs the same keys, and one object given to
// two outputs (one state for two) is refused by name.
TEST(FunctionalMultiIO, MetricObjectsKeepTheirNamesAcrossCompiles) {
  TwoByTwo g;
  Functional model({{"image", g.image}, {"tab", g.tab}}, {{"cls", g.cls}, {"reg", g.reg}}, "again", 5);
  const std::map<std::string, losses::LossPtr> losses = {{"cls", losses::SparseCategoricalCrossentropy()},
                                                         {"reg", losses::MeanSquaredError()}};
  const auto top2 = std::make_shared<metrics::SparseTopKCategoricalAccuracy>(2, "top2");
  const auto mae = std::make_shared<metrics::MeanAbsoluteError>();
  const Data d = make_data(40);
  for (int compiled = 0; compiled < 2; ++compiled) {
    model.compile(optimizers::Adam(0.01), losses,
                  std::map<std::string, std::vector<metrics::MetricPtr>>{{"cls", {top2}}, {"reg", {mae}}});
    EXPECT_EQ(top2->name(), "top2");
    ASSERT_EQ(model.metrics().size(), 2u);
    EXPECT_EQ(model.metrics()[0].log_name, "cls_top2");
    EXPECT_EQ(model.metrics()[1].log_name, "reg_mean_absolute_error");
    const Logs logs = model.evaluate({d.image, d.tab}, {d.cls, d.reg});
    EXPECT_TRUE(logs.contains("cls_top2") && logs.contains("reg_mean_absolute_error"));
    EXPECT_EQ(logs.at("cls_top2"), top2->result());  // the user's object holds the model's state
  }
  EXPECT_VALUE_ERROR(model.compile(optimizers::Adam(0.01), losses,
                                   std::map<std::string, std::vector<metrics::MetricPtr>>{{"cls", {mae}}, {"reg", {mae}}}),
                     "the metric object 'mean_absolute_error' is given twice");
}

}  // namespace
}  // namespace lockstep
