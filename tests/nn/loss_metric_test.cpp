// Losses against hand formulas and Keras' documented examples; metrics' state and naming.
#include <gtest/gtest.h>

#include "common/error_message.hpp"

#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/losses/loss.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/metrics/metric_config.hpp"

namespace lockstep {
namespace {

Tensor mat(const std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
  return Tensor::from_vector(v, Shape{rows, cols});
}
Tensor labels(const std::vector<std::int64_t>& v) {
  return Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())});
}
Tensor per_example(const losses::LossPtr& loss, const Tensor& y_true, const Tensor& y_pred) {
  return loss->per_example(y_true, y_pred, Tensor());
}
double logsumexp(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += std::exp(v);
  return std::log(s);
}
using test::message_of;

TEST(SparseCategoricalCrossentropy, FromLogitsIsLogSumExpMinusTrueLogit) {
  auto loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  const Tensor logits = mat({1, 2, 3, 1, 0, -1}, 2, 3);
  const auto got = per_example(loss, labels({2, 0}), logits).to_vector<float>();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], logsumexp({1, 2, 3}) - 3, 1e-5);
  EXPECT_NEAR(got[1], logsumexp({1, 0, -1}) - 1, 1e-5);
  EXPECT_NEAR((*loss)(labels({2, 0}), logits).item(), (got[0] + got[1]) / 2, 1e-6);
}

TEST(SparseCategoricalCrossentropy, FromProbabilitiesKerasDocExample) {
  // keras.losses.SparseCategoricalCrossentropy docs: y_true [1, 2],
  // y_pred [[0.05, 0.95, 0], [0.1, 0.8, 0.1]] -> 1.177.
  auto loss = losses::SparseCategoricalCrossentropy();
  const Tensor p = mat({0.05f, 0.95f, 0.0f, 0.1f, 0.8f, 0.1f}, 2, 3);
  EXPECT_NEAR((*loss)(labels({1, 2}), p).item(), 1.177, 1e-3);
  EXPECT_NEAR((*loss)(labels({1, 2}), p).item(), -(std::log(0.95) + std::log(0.1)) / 2, 1e-5);
}

TEST(SparseCategoricalCrossentropy, ZeroProbabilityIsClippedAt1em7) {
  auto loss = losses::SparseCategoricalCrossentropy();
  const Tensor p = mat({0.0f, 0.5f, 0.5f}, 1, 3);
  const float got = per_example(loss, labels({0}), p).to_vector<float>()[0];
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, -std::log(1e-7), 1e-3);
}

TEST(SparseCategoricalCrossentropy, UnnormalisedProbabilitiesAreRescaled) {
  // Keras divides y_pred by its sum over the class axis first.
  auto loss = losses::SparseCategoricalCrossentropy();
  const Tensor p = mat({1.0f, 1.0f, 2.0f}, 1, 3);
  EXPECT_NEAR(per_example(loss, labels({2}), p).to_vector<float>()[0], -std::log(0.5), 1e-5);
}

TEST(SparseCategoricalCrossentropy, LabelOutOfRangeNamesTheIndex) {
  const Tensor p = mat({0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.8f}, 2, 3);
  for (bool from_logits : {false, true}) {
    auto loss = losses::SparseCategoricalCrossentropy({.from_logits = from_logits});
    const std::string msg = message_of([&] { (void)per_example(loss, labels({0, 3}), p); });
    EXPECT_NE(msg.find("label 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("index 1"), std::string::npos) << msg;
  }
  auto loss = losses::SparseCategoricalCrossentropy();
  EXPECT_THROW((void)per_example(loss, labels({-1, 0}), p), ValueError);
}

// Labels of every integer dtype are read as their values (uint8's 200 is not -56): the error
// names the value stored.
TEST(SparseCategoricalCrossentropy, LabelOutOfRangeNamesItsValueInEveryIntegerDtype) {
  const Tensor p = mat({0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.8f}, 2, 3);
  auto loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  const std::pair<Tensor, std::string> cases[] = {
      {Tensor::from_vector(std::vector<std::int32_t>{0, -3}, Shape{2}), "label -3"},
      {Tensor::from_vector(std::vector<std::int64_t>{0, std::int64_t{1} << 40}, Shape{2}), "label 1099511627776"},
      {Tensor::from_vector(std::vector<std::uint8_t>{0, 200}, Shape{2}), "label 200"}};
  for (const auto& [y, value] : cases) {
    const std::string msg = message_of([&] { (void)per_example(loss, y, p); });
    EXPECT_NE(msg.find(value + " at index 1 is outside [0, 3)"), std::string::npos) << dtype_name(y.dtype()) << ": " << msg;
  }
}

TEST(SparseCategoricalCrossentropy, MismatchedBatchNamesBothShapes) {
  auto loss = losses::SparseCategoricalCrossentropy();
  const Tensor p = mat({0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.8f}, 2, 3);
  const std::string msg = message_of([&] { (void)per_example(loss, labels({0, 1, 2}), p); });
  EXPECT_NE(msg.find("(3,)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 3)"), std::string::npos) << msg;
}

// A sequence model's logits (batch, steps, classes) against a label per step (batch, steps), as
// Keras takes them: each example's loss is its mean over the steps, the batch's the mean over all.
TEST(SparseCategoricalCrossentropy, SequencesHaveALabelPerStep) {
  auto loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  const std::vector<float> v = {1, 2, 3, 1, 0, -1, 0, 0, 2, 5, 1, 1, 0, 3, 0, 2, 2, 2};
  const Tensor logits = Tensor::from_vector(v, Shape{2, 3, 3});
  const Tensor y = Tensor::from_vector(std::vector<std::int32_t>{2, 0, 1, 0, 1, 2}, Shape{2, 3});
  const std::vector<std::int64_t> label = {2, 0, 1, 0, 1, 2};
  std::vector<double> token(6);
  for (std::size_t t = 0; t < 6; ++t)
    token[t] = logsumexp({v[3 * t], v[3 * t + 1], v[3 * t + 2]}) - v[3 * t + static_cast<std::size_t>(label[t])];
  const auto got = per_example(loss, y, logits).to_vector<float>();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], (token[0] + token[1] + token[2]) / 3, 1e-5);
  EXPECT_NEAR(got[1], (token[3] + token[4] + token[5]) / 3, 1e-5);
  double all = 0;
  for (double t : token) all += t / 6;
  EXPECT_NEAR((*loss)(y, logits).item(), all, 1e-5);
  // Probabilities (from_logits false) give the same, and labels (batch, steps, 1) too.
  const Tensor probs = softmax(logits, -1);
  EXPECT_NEAR((*losses::SparseCategoricalCrossentropy())(y.reshape({2, 3, 1}), probs).item(), all, 1e-5);
  const Tensor two_steps = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 0}, Shape{2, 2});
  const std::string msg = message_of([&] { (void)per_example(loss, two_steps, logits); });
  EXPECT_NE(msg.find("one integer label per position of y_pred (2, 3, 3)"), std::string::npos) << msg;
  // The gradient reaches the logits: (softmax - one_hot) / 6 for the mean over the 6 positions.
  GradientTape tape;
  tape.watch(logits);
  const auto g = tape.gradient((*loss)(y, logits), std::vector<Tensor>{logits})[0].to_vector<float>();
  const auto p = probs.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], (p[i] - (static_cast<std::int64_t>(i % 3) == label[i / 3] ? 1.0f : 0.0f)) / 6, 1e-6) << i;
  // Accuracy counts every step: argmaxes 2, 0, 2 | 0, 1, 0 against 2, 0, 1 | 0, 1, 2 -> 4/6.
  auto acc = metrics::get("accuracy", "sparse_categorical_crossentropy");
  acc->update_state(y, logits);
  EXPECT_DOUBLE_EQ(acc->result(), 4.0 / 6.0);
}

TEST(CategoricalCrossentropy, KerasDocExampleAndSoftTargets) {
  // keras.losses.CategoricalCrossentropy docs: -> 1.177.
  auto loss = losses::CategoricalCrossentropy();
  const Tensor t = mat({0, 1, 0, 0, 0, 1}, 2, 3);
  const Tensor p = mat({0.05f, 0.95f, 0.0f, 0.1f, 0.8f, 0.1f}, 2, 3);
  EXPECT_NEAR((*loss)(t, p).item(), 1.177, 1e-3);
  const Tensor soft = mat({0.25f, 0.75f, 0.0f}, 1, 3);
  const Tensor q = mat({0.5f, 0.25f, 0.25f}, 1, 3);
  EXPECT_NEAR(per_example(loss, soft, q).to_vector<float>()[0], -(0.25 * std::log(0.5) + 0.75 * std::log(0.25)),
              1e-5);
}

TEST(CategoricalCrossentropy, FromLogits) {
  auto loss = losses::CategoricalCrossentropy({.from_logits = true});
  const Tensor t = mat({0.5f, 0.5f, 0.0f}, 1, 3);
  const Tensor z = mat({2.0f, -1.0f, 0.5f}, 1, 3);
  const double lse = logsumexp({2.0, -1.0, 0.5});
  EXPECT_NEAR(per_example(loss, t, z).to_vector<float>()[0], 0.5 * (lse - 2.0) + 0.5 * (lse + 1.0), 1e-5);
}

TEST(CategoricalCrossentropy, ShapeMismatchNamesBothShapes) {
  auto loss = losses::CategoricalCrossentropy();
  const std::string msg =
      message_of([&] { (void)per_example(loss, mat({0, 1, 0, 1}, 2, 2), mat({0.5f, 0.25f, 0.25f, 0, 0, 1}, 2, 3)); });
  EXPECT_NE(msg.find("(2, 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 3)"), std::string::npos) << msg;
}

TEST(BinaryCrossentropy, ProbabilitiesKerasDocExample) {
  // keras.losses.BinaryCrossentropy docs: y_true [[0, 1], [0, 0]],
  // y_pred [[0.6, 0.4], [0.4, 0.6]] -> 0.815.
  auto loss = losses::BinaryCrossentropy();
  const Tensor t = mat({0, 1, 0, 0}, 2, 2);
  const Tensor p = mat({0.6f, 0.4f, 0.4f, 0.6f}, 2, 2);
  const auto got = per_example(loss, t, p).to_vector<float>();
  EXPECT_NEAR(got[0], -(std::log(0.4) + std::log(0.4)) / 2, 1e-5);
  EXPECT_NEAR(got[1], -(std::log(0.6) + std::log(0.4)) / 2, 1e-5);
  EXPECT_NEAR((*loss)(t, p).item(), 0.815, 1e-3);
}

TEST(BinaryCrossentropy, ProbabilitiesOfZeroAndOneAreClipped) {
  auto loss = losses::BinaryCrossentropy();
  const float got = per_example(loss, mat({1}, 1, 1), mat({0}, 1, 1)).to_vector<float>()[0];
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, -std::log(1e-7), 1e-2);
}

TEST(BinaryCrossentropy, FromLogitsKerasDocExample) {
  // keras.losses.BinaryCrossentropy(from_logits=True) docs: y_true [0, 1, 0, 0],
  // y_pred [-18.6, 0.51, 2.94, -12.8] -> 0.865.
  auto loss = losses::BinaryCrossentropy({.from_logits = true});
  const std::vector<float> x = {-18.6f, 0.51f, 2.94f, -12.8f}, z = {0, 1, 0, 0};
  double want = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    const double s = 1 / (1 + std::exp(-static_cast<double>(x[i])));
    want += -(z[i] * std::log(s) + (1 - z[i]) * std::log(1 - s));
  }
  want /= 4;
  const Tensor y_true = Tensor::from_vector(z, Shape{4}), y_pred = Tensor::from_vector(x, Shape{4});
  EXPECT_NEAR((*loss)(y_true, y_pred).item(), want, 1e-5);
  EXPECT_NEAR((*loss)(y_true, y_pred).item(), 0.865, 1e-3);
  // Large logits stay finite (the stable form).
  const float big = per_example(loss, mat({0}, 1, 1), mat({200.0f}, 1, 1)).to_vector<float>()[0];
  EXPECT_NEAR(big, 200.0, 1e-3);
}

TEST(MeanSquaredError, KerasDocExample) {
  // keras.losses.MeanSquaredError docs: y_true [[0, 1], [0, 0]], y_pred [[1, 1], [1, 0]] -> 0.5.
  auto loss = losses::MeanSquaredError();
  const Tensor t = mat({0, 1, 0, 0}, 2, 2), p = mat({1, 1, 1, 0}, 2, 2);
  const auto got = per_example(loss, t, p).to_vector<float>();
  EXPECT_NEAR(got[0], 0.5, 1e-7);
  EXPECT_NEAR(got[1], 0.5, 1e-7);
  EXPECT_NEAR((*loss)(t, mat({3, -1, 0, 0.5f}, 2, 2)).item(), ((9.0 + 4.0) / 2 + 0.25 / 2) / 2, 1e-6);
}

TEST(MeanSquaredError, MismatchedBatchNamesBothShapes) {
  auto loss = losses::MeanSquaredError();
  const std::string msg = message_of([&] { (void)per_example(loss, mat({0, 1, 0}, 3, 1), mat({1, 1}, 2, 1)); });
  EXPECT_NE(msg.find("(3, 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 1)"), std::string::npos) << msg;
}

TEST(MeanAbsoluteError, KerasDocExample) {
  // keras.losses.MeanAbsoluteError docs: y_true [[0, 1], [0, 0]], y_pred [[1, 1], [1, 0]] -> 0.5.
  auto loss = losses::get("mae");
  EXPECT_EQ(loss->name(), "mean_absolute_error");
  const Tensor t = mat({0, 1, 0, 0}, 2, 2), p = mat({1, 1, 1, 0}, 2, 2);
  const auto got = per_example(loss, t, p).to_vector<float>();
  EXPECT_NEAR(got[0], 0.5, 1e-7);
  EXPECT_NEAR(got[1], 0.5, 1e-7);
  EXPECT_NEAR((*loss)(t, mat({3, -1, 0, 0.5f}, 2, 2)).item(), ((3.0 + 2.0) / 2 + 0.5 / 2) / 2, 1e-6);
  const std::string msg = message_of([&] { (void)per_example(loss, mat({0, 1, 0}, 3, 1), mat({1, 1}, 2, 1)); });
  EXPECT_NE(msg.find("mean_absolute_error"), std::string::npos) << msg;
}

TEST(Metrics, MaeIsTheMeanOverExamplesOfEachRowsMeanAbsoluteError) {
  auto m = metrics::get("mae", "mean_squared_error");
  EXPECT_EQ(m->name(), "mae");
  m->update_state(mat({0, 1, 0, 0}, 2, 2), mat({1, 1, 1, 0}, 2, 2));  // rows 0.5, 0.5
  EXPECT_DOUBLE_EQ(m->result(), 0.5);
  m->update_state(mat({0, 0}, 1, 2), mat({2, -2}, 1, 2));  // a row of 2
  EXPECT_DOUBLE_EQ(m->result(), 3.0 / 3.0);
  EXPECT_EQ(metrics::get("mean_absolute_error", "")->name(), "mean_absolute_error");
}

TEST(LossesGet, KerasNames) {
  EXPECT_EQ(losses::get("sparse_categorical_crossentropy")->name(), "sparse_categorical_crossentropy");
  EXPECT_EQ(losses::get("categorical_crossentropy")->name(), "categorical_crossentropy");
  EXPECT_EQ(losses::get("binary_crossentropy")->name(), "binary_crossentropy");
  EXPECT_EQ(losses::get("mse")->name(), "mean_squared_error");
  EXPECT_EQ(losses::get("mean_squared_error")->name(), "mean_squared_error");
  EXPECT_EQ(losses::get("mean_absolute_error")->name(), "mean_absolute_error");
  const std::string msg = message_of([] { (void)losses::get("hinge_typo"); });
  EXPECT_NE(msg.find("hinge_typo"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sparse_categorical_crossentropy"), std::string::npos) << msg;
}

TEST(Metrics, AccuracyWithSparseLossIsSparseCategoricalAccuracy) {
  auto m = metrics::get("accuracy", "sparse_categorical_crossentropy");
  EXPECT_EQ(m->name(), "accuracy");
  EXPECT_NE(dynamic_cast<metrics::SparseCategoricalAccuracy*>(m.get()), nullptr);
  // Rows' argmax: 1, 2, 0, 0 against labels 1, 2, 1, 0 -> 3/4.
  m->update_state(labels({1, 2, 1, 0}), mat({0.1f, 0.8f, 0.1f, 0.2f, 0.3f, 0.5f, 0.6f, 0.3f, 0.1f, 0.9f, 0.05f, 0.05f}, 4, 3));
  EXPECT_DOUBLE_EQ(m->result(), 0.75);
  m->update_state(labels({2}), mat({0.9f, 0.05f, 0.05f}, 1, 3));
  EXPECT_DOUBLE_EQ(m->result(), 3.0 / 5.0);
  m->reset_state();
  EXPECT_DOUBLE_EQ(m->result(), 0.0);
}

TEST(Metrics, AccuracyWithCategoricalLossComparesArgmaxOfOneHot) {
  auto m = metrics::get("acc", "categorical_crossentropy");
  EXPECT_EQ(dynamic_cast<metrics::SparseCategoricalAccuracy*>(m.get()), nullptr);
  m->update_state(mat({0, 1, 1, 0}, 2, 2), mat({0.3f, 0.7f, 0.4f, 0.6f}, 2, 2));
  EXPECT_DOUBLE_EQ(m->result(), 0.5);
}

TEST(Metrics, MeanIsWeightedAndResets) {
  // keras.metrics.Mean docs: update_state([1, 3, 5, 7]) -> 4.
  metrics::Mean m;
  m.update_state(Tensor::from_vector<float>({1, 3, 5, 7}, Shape{4}), Tensor());
  EXPECT_DOUBLE_EQ(m.result(), 4.0);
  m.reset_state();
  // sample_weight [1, 1, 0, 0] -> 2.
  m.update(1, 1);
  m.update(3, 1);
  m.update(5, 0);
  m.update(7, 0);
  EXPECT_DOUBLE_EQ(m.result(), 2.0);
  m.reset_state();
  m.update(2.0, 1.0);
  m.update(5.0, 3.0);
  EXPECT_DOUBLE_EQ(m.result(), (2.0 + 15.0) / 4.0);
  m.reset_state();
  EXPECT_DOUBLE_EQ(m.result(), 0.0);
  EXPECT_DOUBLE_EQ(m.state()[1], 0.0);
}

// merge_state adds a batch state to the running state, from a tensor or from values the host
// holds already (a model's step numbers); a state of another size is refused, naming the metric
// and both sizes, and leaves the state as it was.
TEST(Metrics, MergeStateAddsAHostStateAsItsTensorAndRefusesAnotherSize) {
  metrics::Mean m("seen");
  const std::vector<float> host{6.0f, 2.0f};
  m.merge_state(std::span<const float>(host));
  m.merge_state(Tensor::from_vector<float>({4, 1}, Shape{2}));
  EXPECT_EQ(m.state(), (std::vector<double>{10.0, 3.0}));
  EXPECT_DOUBLE_EQ(m.result(), 10.0 / 3.0);
  const std::vector<float> three{1.0f, 2.0f, 3.0f};
  const std::string want = "metric 'seen': a state of 3 values cannot merge into 2";
  EXPECT_EQ(test::message_of([&] { m.merge_state(std::span<const float>(three)); }), want);
  EXPECT_EQ(test::message_of([&] { m.merge_state(Tensor::from_vector(three, Shape{3})); }), want);
  EXPECT_EQ(m.state(), (std::vector<double>{10.0, 3.0}));
}

// Keras' categorical_accuracy: each row's top class against its one-hot target's (ties: the first).
// Integer labels are refused by name rather than read as one-hot rows of one class.
TEST(Metrics, CategoricalAccuracyComparesTopClassesOfOneHotRowsAndRefusesLabels) {
  auto m = metrics::get("categorical_accuracy", "mean_squared_error");
  EXPECT_EQ(m->name(), "categorical_accuracy");
  // Top classes 1, 0, 2 (0.4 tie: the first) against targets 1, 1, 2 -> 2/3.
  m->update_state(mat({0, 1, 0, 0, 1, 0, 0, 0, 1}, 3, 3), mat({0.1f, 0.8f, 0.1f, 0.4f, 0.4f, 0.2f, 0, 0.3f, 0.7f}, 3, 3));
  EXPECT_DOUBLE_EQ(m->result(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m->clone_empty()->result(), 0.0);
  EXPECT_EQ(m->clone_empty()->name(), "categorical_accuracy");
  const std::string msg = message_of([&] { m->update_state(mat({1, 0, 2}, 3, 1), mat({0, 1, 0, 0, 1, 0, 0, 0, 1}, 3, 3)); });
  EXPECT_NE(msg.find("categorical_accuracy: y_true (3, 1) must be one-hot rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sparse_categorical_accuracy"), std::string::npos) << msg;
  EXPECT_DOUBLE_EQ(m->result(), 2.0 / 3.0);  // the refused batch added nothing
}

TEST(Metrics, MseIsTheMeanOverExamplesOfEachRowsMeanSquaredError) {
  auto m = metrics::get("mse", "mean_absolute_error");
  EXPECT_EQ(m->name(), "mse");
  m->update_state(mat({0, 1, 0, 0}, 2, 2), mat({2, 1, 1, 0}, 2, 2));  // rows (4 + 0) / 2, (1 + 0) / 2
  EXPECT_DOUBLE_EQ(m->result(), (2.0 + 0.5) / 2);
  m->update_state(mat({0, 0}, 1, 2), mat({3, -3}, 1, 2));  // a row of 9
  EXPECT_DOUBLE_EQ(m->result(), (2.0 + 0.5 + 9.0) / 3);
  EXPECT_EQ(metrics::get("mean_squared_error", "")->name(), "mean_squared_error");
  const std::string msg = message_of([&] { m->update_state(mat({0, 1, 0}, 3, 1), mat({1, 1}, 2, 1)); });
  EXPECT_NE(msg.find("mse: y_true (3, 1) does not match y_pred (2, 1)"), std::string::npos) << msg;
}

TEST(Metrics, UnknownNameThrows) {
  EXPECT_THROW((void)metrics::get("f1_typo", "mse"), ValueError);
  const std::string msg = message_of([] { (void)metrics::get("auc", ""); });
  EXPECT_NE(msg.find("unknown metric 'auc'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mean_absolute_error, mae, MAE"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lockstep
