// Keras' weighted metrics: a metric's update_state with sample_weight (Metric::weighted_batch_state)
// and compile's weighted_metrics (Model::add_weighted_metrics), with Keras 3.15.1's numbers and log
// names; per-output sample weights of fit and evaluate on tensors (FitOptions::sample_weights).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/error_message.hpp"
#include "common/mirrored_model.hpp"
#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/metrics/metric_config.hpp"

namespace lockstep {
namespace {

using test::message_of;

Tensor floats(const std::vector<float>& v, Shape shape = {}) {
  if (shape.rank() == 0) shape = Shape{static_cast<std::int64_t>(v.size())};
  return Tensor::from_vector(v, shape);
}

Tensor labels(const std::vector<std::int64_t>& v, Shape shape = {}) {
  if (shape.rank() == 0) shape = Shape{static_cast<std::int64_t>(v.size())};
  return Tensor::from_vector(v, shape);
}

double weighted_result(const metrics::MetricPtr& m, const Tensor& y_true, const Tensor& y_pred, const Tensor& w) {
  m->update_state(y_true, y_pred, w);
  return m->result();
}

// The numbers Keras 3.15.1 gives for these batches (keras.metrics.X().update_state(y_true, y_pred,
// sample_weight=w); result()), float32 results.
TEST(WeightedMetrics, UpdateStateWithSampleWeightGivesKerasNumbers) {
  const Tensor scores = floats({.9f, .05f, .05f, .1f, .8f, .1f, .3f, .4f, .3f, .2f, .2f, .6f}, Shape{4, 3});
  const Tensor y = labels({0, 1, 2, 1});
  const Tensor w = floats({1, 2, 3, 4});
  std::vector<float> one_hot(12, 0.0f);
  for (int i = 0; i < 4; ++i) one_hot[static_cast<std::size_t>(i * 3 + y.to_vector<std::int64_t>()[i])] = 1.0f;
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::SparseCategoricalAccuracy>(), y, scores, w), 0.3, 1e-7);
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::CategoricalAccuracy>(), floats(one_hot, Shape{4, 3}), scores, w),
              0.3, 1e-7);
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::TopKCategoricalAccuracy>(1), floats(one_hot, Shape{4, 3}),
                              scores, w),
              0.3, 1e-7);
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::SparseTopKCategoricalAccuracy>(1), y, scores, w), 0.3, 1e-7);
  const Tensor a = floats({1, 2, 3, 4, 5, 6}, Shape{3, 2}), b = floats({1.5f, 2, 3, 3, 4, 6.5f}, Shape{3, 2});
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::MeanSquaredError>(), a, b, floats({0.5f, 1, 2})),
              0.5178571343421936, 1e-7);
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::MeanAbsoluteError>(), a, b, floats({0.5f, 1, 2}, Shape{3, 1})),
              0.6071428656578064, 1e-7);
  EXPECT_NEAR(weighted_result(std::make_shared<metrics::BinaryAccuracy>(), floats({1, 0, 1, 1, 0, 0}, Shape{3, 2}),
                              floats({.7f, .2f, .4f, .9f, .6f, .1f}, Shape{3, 2}), floats({2, 1, 1})),
              0.75, 1e-7);
  // Mean of values: Keras' own examples, and rows of two values weighted per row.
  EXPECT_EQ(weighted_result(std::make_shared<metrics::Mean>(), floats({1, 3, 5, 7}), Tensor(), floats({1, 1, 0, 0})),
            2.0);
  EXPECT_EQ(weighted_result(std::make_shared<metrics::Mean>(), floats({1, 3, 5, 7}, Shape{2, 2}), Tensor(),
                            floats({1, 3})),
            5.0);
  // A label per position (b, t, classes): weights per example (b,) or per position (b, t).
  const Tensor seq = floats({.9f, .05f, .05f, .1f, .8f, .1f, .3f, .4f, .3f, .2f, .2f, .6f}, Shape{2, 2, 3});
  const Tensor seq_y = labels({0, 1, 2, 2}, Shape{2, 2});
  EXPECT_EQ(weighted_result(std::make_shared<metrics::SparseCategoricalAccuracy>(), seq_y, seq, floats({1, 3})), 0.625);
  EXPECT_EQ(weighted_result(std::make_shared<metrics::SparseCategoricalAccuracy>(), seq_y, seq,
                            floats({1, 2, 3, 0}, Shape{2, 2})),
            0.5);
  // Batches add up: the state is [sum of w * value, sum of w].
  auto m = std::make_shared<metrics::SparseCategoricalAccuracy>();
  m->update_state(y, scores, w);
  m->update_state(y, scores);  // no weights: each example weighs 1
  EXPECT_EQ(m->state(), (std::vector<double>{3 + 2, 10 + 4}));
}

// Every metric class: weights of ones give batch_state's bits, and the state a metric merges.
TEST(WeightedMetrics, OnesGiveTheBitsOfNoWeights) {
  const Tensor scores = test::random_uniform(Shape{37, 5}, 4, 0.0f, 1.0f);
  const Tensor y = test::random_classification(37, 3, 5, 8).y;
  const Tensor hot = cast(one_hot(y, 5), DType::kF32);
  const Tensor ones = Tensor::ones(Shape{37});
  const Tensor seq = test::random_uniform(Shape{37, 3, 5}, 6, 0.0f, 1.0f);
  const Tensor seq_y = test::random_classification(111, 3, 5, 9).y.reshape(Shape{37, 3});
  struct Case {
    metrics::MetricPtr metric;
    Tensor y_true, y_pred;
  };
  const std::vector<Case> cases = {
      {std::make_shared<metrics::SparseCategoricalAccuracy>(), y, scores},
      {std::make_shared<metrics::SparseCategoricalAccuracy>(), seq_y, seq},
      {std::make_shared<metrics::AccuracyByShape>(), y, scores},
      {std::make_shared<metrics::AccuracyByShape>(), hot, scores},
      {std::make_shared<metrics::Accuracy>(), hot, hot},
      {std::make_shared<metrics::CategoricalAccuracy>(), hot, scores},
      {std::make_shared<metrics::TopKCategoricalAccuracy>(2), hot, scores},
      {std::make_shared<metrics::SparseTopKCategoricalAccuracy>(3), y, scores},
      {std::make_shared<metrics::BinaryAccuracy>("b", 0.4), hot, scores},
      {std::make_shared<metrics::MeanSquaredError>(), hot, scores},
      {std::make_shared<metrics::MeanAbsoluteError>(), hot, scores},
      {std::make_shared<metrics::Mean>(), scores, Tensor()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.metric->name() + " " + (c.y_pred.defined() ? c.y_pred : c.y_true).shape().str());
    EXPECT_EQ(c.metric->weighted_batch_state(c.y_true, c.y_pred, ones).to_vector<float>(),
              c.metric->batch_state(c.y_true, c.y_pred).to_vector<float>());
    EXPECT_EQ(c.metric->weighted_batch_state(c.y_true, c.y_pred, ones.reshape(Shape{37, 1})).to_vector<float>(),
              c.metric->batch_state(c.y_true, c.y_pred).to_vector<float>());
  }
}

TEST(WeightedMetrics, BadWeightsAreValueErrorsNamingThem) {
  auto m = std::make_shared<metrics::MeanSquaredError>();
  const Tensor a = Tensor::ones(Shape{3, 2});
  EXPECT_NE(message_of([&] { m->update_state(a, a, Tensor::ones(Shape{2})); })
                .find("metric 'mean_squared_error': sample_weight must hold one weight per example (shape (3,) or "
                      "(3, 1)), got shape (2,)"),
            std::string::npos)
      << message_of([&] { m->update_state(a, a, Tensor::ones(Shape{2})); });
  // A metric class of the user's own has no per-example values to weigh.
  struct Custom final : metrics::Metric {
    Custom() : Metric("custom") {}
    Tensor batch_state(const Tensor&, const Tensor&) const override { return Tensor::zeros({2}); }
    metrics::MetricPtr clone_empty() const override { return std::make_shared<Custom>(); }
  };
  Custom c;
  EXPECT_NE(message_of([&] { c.update_state(a, a, Tensor::ones(Shape{3})); })
                .find("metric 'custom' has no per-example values (Metric::values), so it takes no sample weights"),
            std::string::npos);
}

constexpr std::int64_t kN = 40;
const test::Classification& data() {
  static const test::Classification d = test::random_classification(kN, 6, 3, 12);
  return d;
}
Tensor weights() { return test::random_uniform(Shape{kN}, 31, 0.0f, 2.0f); }

std::unique_ptr<Sequential> make_model() {
  set_random_seed(4);
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 6), layers::Dense(3, "softmax")});
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->add_weighted_metrics({"accuracy", "sparse_top_k_categorical_accuracy"});
  return m;
}

// The weighted accuracy of the model's predictions, computed here: sum(w * match) / sum(w).
double expected_weighted_accuracy(Model& m, const Tensor& w) {
  const std::vector<float> p = m.predict(data().x).to_vector<float>();
  const std::vector<std::int64_t> y = data().y.to_vector<std::int64_t>();
  const std::vector<float> wv = w.to_vector<float>();
  double total = 0, count = 0;
  for (std::int64_t i = 0; i < kN; ++i) {
    const float* r = p.data() + i * 3;
    const std::int64_t arg = std::max_element(r, r + 3) - r;
    total += wv[static_cast<std::size_t>(i)] * (arg == y[static_cast<std::size_t>(i)]);
    count += wv[static_cast<std::size_t>(i)];
  }
  return total / count;
}

// Keras 3 logs a weighted metric under its name, or "weighted_<name>" where metrics has the name
// already (compile(metrics=["accuracy"], weighted_metrics=["accuracy"]) logs accuracy and
// weighted_accuracy; Keras 3.15.1: 0.5 and 0.4737 on its check); without weights it is the metric.
TEST(WeightedMetrics, LoggedUnderKerasNamesWeighingTheSampleWeights) {
  auto m = make_model();
  const Tensor w = weights();
  const Logs logs = m->evaluate(data().x, data().y, {.batch_size = 16, .sample_weight = w});
  EXPECT_EQ(logs.count("accuracy"), 1u);
  EXPECT_EQ(logs.count("weighted_accuracy"), 1u);
  EXPECT_EQ(logs.count("sparse_top_k_categorical_accuracy"), 1u);
  EXPECT_NEAR(logs.at("weighted_accuracy"), expected_weighted_accuracy(*m, w), 1e-6);
  EXPECT_EQ(logs.at("sparse_top_k_categorical_accuracy"), 1.0);  // k = 5 of 3 classes
  EXPECT_NE(logs.at("weighted_accuracy"), logs.at("accuracy"));
  const Logs plain = m->evaluate(data().x, data().y, {.batch_size = 16});
  EXPECT_EQ(plain.at("weighted_accuracy"), plain.at("accuracy"));
  EXPECT_EQ(plain.at("accuracy"), logs.at("accuracy"));
  // fit logs them too: all-ones weights train and log the bits of no weights.
  auto a = make_model(), b = make_model();
  FitOptions o{.epochs = 2, .batch_size = 16, .verbose = 0};
  const History ha = a->fit(data().x, data().y, o);
  o.sample_weight = Tensor::ones(Shape{kN});
  const History hb = b->fit(data().x, data().y, o);
  EXPECT_EQ(ha.history.at("weighted_accuracy"), ha.history.at("accuracy"));
  EXPECT_EQ(hb.history.at("weighted_accuracy"), ha.history.at("weighted_accuracy"));
  EXPECT_EQ(test::weights_of(*a), test::weights_of(*b));
}

TEST(WeightedMetrics, ReplicasComputeWhatOneDeviceComputes) {
  const Tensor w = weights();
  std::map<std::string, double> one;
  std::vector<double> one_history;
  for (int replicas : {0, 2}) {
    SCOPED_TRACE(replicas);
    auto on = test::model_on_cpus(replicas, [] { return make_model(); });
    FitOptions o{.epochs = 2, .batch_size = 10, .shuffle = false, .verbose = 0};
    o.sample_weight = w;
    const History h = on.model->fit(data().x, data().y, o);
    const Logs logs = on.model->evaluate(data().x, data().y, {.batch_size = 12, .sample_weight = w});
    if (replicas == 0) {
      one = logs;
      one_history = h.history.at("weighted_accuracy");
      EXPECT_NEAR(logs.at("weighted_accuracy"), expected_weighted_accuracy(*on.model, w), 1e-6);
      continue;
    }
    EXPECT_NEAR(logs.at("weighted_accuracy"), one.at("weighted_accuracy"), 1e-6);
    EXPECT_NEAR(logs.at("loss"), one.at("loss"), 1e-5);
    for (std::size_t e = 0; e < one_history.size(); ++e)
      EXPECT_NEAR(h.history.at("weighted_accuracy")[e], one_history[e], 1e-6);
  }
}

std::unique_ptr<Functional> make_two_outputs() {
  set_random_seed(3);
  const KerasTensor in = Input({6}, "in");
  const KerasTensor h = call(layers::Dense(8, "relu"), in);
  auto cls = layers::Dense(3, "softmax");
  cls->set_name("cls");
  auto reg = layers::Dense(1);
  reg->set_name("reg");
  auto m = std::make_unique<Functional>(std::vector<KerasTensor>{in},
                                        std::vector<KerasTensor>{call(cls, h), call(reg, h)}, "two", 7);
  m->compile(optimizers::SGD(0.1), {{"cls", losses::SparseCategoricalCrossentropy()}, {"reg", losses::MeanSquaredError()}},
             {{"cls", {"accuracy"}}});
  m->add_weighted_metrics({"accuracy"}, "cls");
  m->add_weighted_metrics({"mae"}, "reg");
  return m;
}

// A model of several outputs: "<output>_weighted_<name>" beside "<output>_<name>" (Keras 3.15.1:
// a_accuracy, a_weighted_accuracy, b_mae), each output weighed by its own array when there is one
// per output (FitOptions and EvaluateOptions::sample_weights, a dataset's components).
TEST(WeightedMetrics, EachOutputWeighsItsOwnSampleWeights) {
  const Tensor reg = test::random_uniform(Shape{kN, 1}, 8);
  const Tensor w = weights(), w2 = test::random_uniform(Shape{kN}, 32, 0.0f, 3.0f);
  auto m = make_two_outputs();
  EvaluateOptions o{.batch_size = 16};
  o.sample_weights = {w, w2};
  const Logs logs = m->evaluate({data().x}, {data().y, reg}, o);
  for (const char* name : {"cls_accuracy", "cls_weighted_accuracy", "reg_mae", "cls_loss", "reg_loss"})
    EXPECT_EQ(logs.count(name), 1u) << name;
  const Logs in_dataset = m->evaluate(data::Dataset::from_tensor_slices({data().x, data().y, reg, w, w2}).batch(16));
  EXPECT_EQ(in_dataset, logs);
  // Each output's numbers are those of its own weights given alone to every output.
  const Logs first = m->evaluate({data().x}, {data().y, reg}, {.batch_size = 16, .sample_weight = w});
  const Logs second = m->evaluate({data().x}, {data().y, reg}, {.batch_size = 16, .sample_weight = w2});
  EXPECT_EQ(logs.at("cls_weighted_accuracy"), first.at("cls_weighted_accuracy"));
  EXPECT_EQ(logs.at("cls_loss"), first.at("cls_loss"));
  EXPECT_EQ(logs.at("reg_mae"), second.at("reg_mae"));
  EXPECT_EQ(logs.at("reg_loss"), second.at("reg_loss"));
  EXPECT_NE(first.at("reg_mae"), second.at("reg_mae"));
  // fit on tensors with one array per output trains as the dataset carrying them.
  auto a = make_two_outputs(), b = make_two_outputs();
  FitOptions f{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};
  f.sample_weights = {w, w2};
  const History ha = a->fit({data().x}, {data().y, reg}, f);
  f.sample_weights.clear();
  const History hb = b->fit(data::Dataset::from_tensor_slices({data().x, data().y, reg, w, w2}).batch(8), f);
  EXPECT_EQ(test::weights_of(*a), test::weights_of(*b));
  for (const char* name : {"loss", "cls_loss", "reg_loss", "cls_accuracy", "cls_weighted_accuracy", "reg_mae"})
    EXPECT_EQ(ha.history.at(name), hb.history.at(name)) << name;
}

TEST(WeightedMetrics, BadArgumentsAreValueErrorsNamingThem) {
  auto m = make_two_outputs();
  EXPECT_NE(message_of([&] { m->add_weighted_metrics({"accuracy"}, "nope"); }).find("nope"), std::string::npos);
  EXPECT_NE(message_of([&] { m->add_weighted_metrics({"acuracy"}, "cls"); }).find("acuracy"), std::string::npos);
  EXPECT_NE(message_of([&] { m->add_weighted_metrics({"accuracy"}); }).find("name the output the metrics read"),
            std::string::npos);
  EXPECT_NE(message_of([&] { m->add_weighted_metrics({"accuracy"}, "cls"); })
                .find("two metrics are logged as 'cls_weighted_accuracy'"),
            std::string::npos);
  const Tensor reg = test::random_uniform(Shape{kN, 1}, 8);
  const auto eval_error = [&](const EvaluateOptions& o) {
    return message_of([&] { m->evaluate({data().x}, {data().y, reg}, o); });
  };
  EvaluateOptions o;
  o.sample_weights = {weights()};
  EXPECT_NE(eval_error(o).find("sample_weight holds 1 arrays; the model has 2 outputs (cls, reg), one array each"),
            std::string::npos)
      << eval_error(o);
  o.sample_weights = {weights(), Tensor::ones(Shape{kN, 3})};
  EXPECT_NE(eval_error(o).find("(output 'reg'): sample_weight must hold one weight per example"), std::string::npos)
      << eval_error(o);
  o.sample_weight = weights();
  EXPECT_NE(eval_error(o).find("not both"), std::string::npos) << eval_error(o);
  FitOptions f{.verbose = 0};
  f.sample_weights = {weights(), weights()};
  f.class_weight = {{0, 2.0}};
  EXPECT_NE(message_of([&] { m->fit({data().x}, {data().y, reg}, f); })
                .find("You cannot `class_weight` and `sample_weight` at the same time."),
            std::string::npos);
}

// A saved model keeps its weighted metrics, in lockstep's format and in a .keras file (Keras'
// compile_config "weighted_metrics"), logging the same names and numbers after loading.
TEST(WeightedMetrics, SavedModelsKeepThem) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("lockstep_weighted_metrics_" + std::to_string(::getpid()))).string();
  const Tensor w = weights();
  const Tensor reg = test::random_uniform(Shape{kN, 1}, 8);
  for (const std::string& path : {dir + "_one", dir + "_one.keras"}) {
    SCOPED_TRACE(path);
    auto m = make_model();
    const Logs before = m->evaluate(data().x, data().y, {.batch_size = 16, .sample_weight = w});
    save_model(*m, path);
    auto loaded = load_model(path);
    EXPECT_EQ(loaded->evaluate(data().x, data().y, {.batch_size = 16, .sample_weight = w}), before);
  }
  for (const std::string& path : {dir + "_two", dir + "_two.keras"}) {
    SCOPED_TRACE(path);
    auto m = make_two_outputs();
    EvaluateOptions o{.batch_size = 16};
    o.sample_weights = {w, w};
    const Logs before = m->evaluate({data().x}, {data().y, reg}, o);
    save_model(*m, path);
    auto loaded = load_model(path);
    EXPECT_EQ(loaded->evaluate({data().x}, {data().y, reg}, o), before);
  }
  for (const char* end : {"_one", "_one.keras", "_two", "_two.keras"}) std::filesystem::remove_all(dir + end);
}

}  // namespace
}  // namespace lockstep
