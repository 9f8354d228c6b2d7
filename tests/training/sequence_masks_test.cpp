// Keras' losses and metrics on a sequence output (training/sample_weights.hpp): a loss per
// position, weighed by the output's Keras mask (Embedding(mask_zero=true) carried through the
// model) and by sample weights per position (N, steps), as Keras 3's reduce_weighted_values and
// MeanMetricWrapper compute them. Checked against the formulas on the model's own predictions.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "common/mirrored_model.hpp"
#include "common/random_data.hpp"
#include "common/relative_error.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

constexpr std::int64_t kN = 16, kSteps = 6, kVocab = 7;

// Tokens in [1, kVocab) with trailing padding (0): row i keeps 2 + i % 4 steps, so rows 0-7 and
// 8-15 keep as many (40 each).
Tensor tokens() {
  std::vector<float> v(static_cast<std::size_t>(kN * kSteps), 0.0f);
  for (std::int64_t i = 0; i < kN; ++i)
    for (std::int64_t t = 0; t < 2 + i % 4; ++t) v[static_cast<std::size_t>(i * kSteps + t)] = static_cast<float>(1 + (i * 3 + t * 5) % (kVocab - 1));
  return Tensor::from_vector(v, Shape{kN, kSteps});
}

// The next-token labels: each step's label, any class (also on the padded steps).
Tensor labels() {
  std::vector<std::int64_t> v(static_cast<std::size_t>(kN * kSteps));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>((i * 5 + 2) % kVocab);
  return Tensor::from_vector(v, Shape{kN, kSteps});
}

std::unique_ptr<Model> tagger(bool mask_zero, bool functional = false) {
  set_random_seed(3);
  std::unique_ptr<Model> m;
  if (functional) {
    const KerasTensor in = Input({kSteps});
    KerasTensor x = call(layers::Embedding(kVocab, 8, mask_zero), in);
    x = call(layers::Dense(8, "relu"), x);
    m = std::make_unique<Functional>(in, call(layers::Dense(kVocab, "softmax"), x), "tagger", 4);
  } else {
    m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Input({kSteps}), layers::Embedding(kVocab, 8, mask_zero), layers::Dense(8, "relu"),
        layers::Dense(kVocab, "softmax")});
  }
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// Keras' arithmetic on the model's predictions: sum(w * loss) / divisor and the accuracy
// sum(w * correct) / sum(w), over every position, where w is `weight` (one per position).
struct Expected {
  double loss_sum = 0, weight_sum = 0, correct = 0;
};
Expected by_hand(Model& m, const std::vector<float>& weight) {
  const std::vector<float> p = m.predict(tokens()).to_vector<float>();
  const std::vector<std::int64_t> y = labels().to_vector<std::int64_t>();
  Expected e;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float* row = p.data() + i * kVocab;
    const std::int64_t argmax = std::max_element(row, row + kVocab) - row;
    e.loss_sum += weight[i] * -std::log(static_cast<double>(row[y[i]]));
    e.weight_sum += weight[i];
    e.correct += weight[i] * (argmax == y[i] ? 1.0 : 0.0);
  }
  return e;
}

std::vector<float> kept_steps() {
  std::vector<float> m;
  for (float t : tokens().to_vector<float>()) m.push_back(t != 0.0f ? 1.0f : 0.0f);
  return m;
}

TEST(SequenceMasks, TheMaskLeavesPaddedStepsOutOfTheLossAndTheMetrics) {
  for (bool functional : {false, true}) {
    SCOPED_TRACE(functional ? "Functional" : "Sequential");
    auto m = tagger(true, functional);
    const Logs logs = m->evaluate(tokens(), labels(), {.batch_size = kN});
    const std::vector<float> kept = kept_steps();
    const Expected e = by_hand(*m, kept);
    // Keras: sum(mask * loss) / sum(mask), and the accuracy of the kept steps.
    EXPECT_NEAR(logs.at("loss"), e.loss_sum / e.weight_sum, 1e-5 * logs.at("loss"));
    EXPECT_NEAR(logs.at("accuracy"), e.correct / e.weight_sum, 1e-6);
    const Expected every = by_hand(*m, std::vector<float>(kept.size(), 1.0f));
    EXPECT_GT(std::abs(logs.at("loss") - every.loss_sum / every.weight_sum), 1e-4 * logs.at("loss"))
        << "the padded steps must not count";
    EXPECT_NE(logs.at("accuracy"), every.correct / every.weight_sum);
  }
}

TEST(SequenceMasks, WeightsPerStepWeighEachStepsLoss) {
  auto m = tagger(false);
  const Tensor w = test::random_uniform(Shape{kN, kSteps}, 12, 0.0f, 2.0f);
  m->add_weighted_metrics(std::vector<std::string>{"accuracy"});
  const Logs logs = m->evaluate(tokens(), labels(), {.batch_size = kN, .sample_weight = w});
  const Expected e = by_hand(*m, w.to_vector<float>());
  // Keras 3: sum(w * loss) over the steps / their number; a weighted metric's mean by w.
  EXPECT_NEAR(logs.at("loss"), e.loss_sum / (kN * kSteps), 1e-5 * logs.at("loss"));
  EXPECT_NEAR(logs.at("weighted_accuracy"), e.correct / e.weight_sum, 1e-6);
  const Expected plain = by_hand(*m, std::vector<float>(kN * kSteps, 1.0f));
  EXPECT_NEAR(logs.at("accuracy"), plain.correct / plain.weight_sum, 1e-6) << "compile's metrics take no weights";
}

TEST(SequenceMasks, MaskAndWeightsTogether) {
  auto m = tagger(true);
  const Tensor w = test::random_uniform(Shape{kN, kSteps}, 13, 0.0f, 2.0f);
  m->add_weighted_metrics(std::vector<std::string>{"accuracy"});
  const Logs logs = m->evaluate(tokens(), labels(), {.batch_size = kN, .sample_weight = w});
  const std::vector<float> kept = kept_steps(), wv = w.to_vector<float>();
  std::vector<float> both(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) both[i] = kept[i] * wv[i];
  const Expected e = by_hand(*m, both), mask = by_hand(*m, kept);
  // Keras' apply_mask: w * mask * total / valid, summed over total steps: sum(w mask loss) / sum(mask).
  EXPECT_NEAR(logs.at("loss"), e.loss_sum / mask.weight_sum, 1e-5 * logs.at("loss"));
  EXPECT_NEAR(logs.at("weighted_accuracy"), e.correct / e.weight_sum, 1e-6);
  EXPECT_NEAR(logs.at("accuracy"), mask.correct / mask.weight_sum, 1e-6);
  // A weight per example weighs each of its steps.
  const Tensor per_row = test::random_uniform(Shape{kN}, 14, 0.0f, 2.0f);
  const Logs rows = m->evaluate(tokens(), labels(), {.batch_size = kN, .sample_weight = per_row});
  std::vector<float> spread(kept.size());
  const std::vector<float> rv = per_row.to_vector<float>();
  for (std::size_t i = 0; i < kept.size(); ++i) spread[i] = kept[i] * rv[i / kSteps];
  const Expected r = by_hand(*m, spread);
  EXPECT_NEAR(rows.at("loss"), r.loss_sum / mask.weight_sum, 1e-5 * rows.at("loss"));
  EXPECT_NEAR(rows.at("weighted_accuracy"), r.correct / r.weight_sum, 1e-6);
}

TEST(SequenceMasks, WeightsOfOnesPerStepTrainTheBitsOfNoWeights) {
  FitOptions plain{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};
  FitOptions ones = plain;
  ones.sample_weight = Tensor::ones(Shape{kN, kSteps});
  auto a = tagger(false), b = tagger(false);
  const History ha = a->fit(tokens(), labels(), plain), hb = b->fit(tokens(), labels(), ones);
  EXPECT_EQ(test::weights_of(*a), test::weights_of(*b));
  EXPECT_EQ(ha.history.at("loss"), hb.history.at("loss"));
}

// Each replica weighs its slice by its own mask's count, as Keras' under MirroredStrategy: where
// the slices keep as many steps (rows 0-7 and 8-15 here), N replicas train what one device does.
TEST(SequenceMasks, ReplicasWhoseSlicesKeepAsManyStepsTrainWhatOneDeviceTrains) {
  const FitOptions o{.epochs = 3, .batch_size = kN, .shuffle = false, .verbose = 0};
  const auto run = [&](int replicas) {
    auto on = test::model_on_cpus(replicas, [] { return tagger(true); });
    const History h = on.model->fit(tokens(), labels(), o);
    return std::make_pair(test::weights_of(*on.model), h.history.at("loss"));
  };
  const auto one = run(0), two = run(2);
  EXPECT_LE(test::max_rel_diff(two.first, one.first), 1e-5);
  for (std::size_t e = 0; e < 3; ++e) EXPECT_NEAR(two.second[e], one.second[e], 1e-5);
  EXPECT_LT(one.second[2], one.second[0]) << "the model must learn";
}

TEST(SequenceMasks, ACategoricalCrossentropyOfOneHotStepsIsTheSparseOne) {
  const Tensor y = labels();
  const Tensor hot = cast(one_hot(y, kVocab), DType::kF32).reshape(Shape{kN, kSteps, kVocab});
  auto m = tagger(true);
  const double sparse = m->evaluate(tokens(), y, {.batch_size = kN}).at("loss");
  m->compile(optimizers::Adam(1e-2), losses::CategoricalCrossentropy());
  EXPECT_NEAR(m->evaluate(tokens(), hot, {.batch_size = kN}).at("loss"), sparse, 1e-5 * sparse);
  auto plain = tagger(false);
  const double sparse_plain = plain->evaluate(tokens(), y, {.batch_size = kN}).at("loss");
  plain->compile(optimizers::Adam(1e-2), losses::CategoricalCrossentropy());
  EXPECT_NEAR(plain->evaluate(tokens(), hot, {.batch_size = kN}).at("loss"), sparse_plain, 1e-5 * sparse_plain);
}

// A target per step (b, steps, 2): mse and mae are means over the last axis per step, masked.
TEST(SequenceMasks, ARegressionPerStepIsMaskedInItsLossAndMetrics) {
  set_random_seed(3);
  Sequential m({layers::Input({kSteps}), layers::Embedding(kVocab, 8, true), layers::Dense(2)});
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError(), {"mae"});
  const Tensor y = test::random_uniform(Shape{kN, kSteps, 2}, 15, -1.0f, 1.0f);
  const Logs logs = m.evaluate(tokens(), y, {.batch_size = kN});
  const std::vector<float> p = m.predict(tokens()).to_vector<float>(), t = y.to_vector<float>(), kept = kept_steps();
  double se = 0, ae = 0, steps = 0;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    for (std::size_t j = 0; j < 2; ++j) {
      const double d = p[i * 2 + j] - t[i * 2 + j];
      se += kept[i] * d * d / 2;
      ae += kept[i] * std::abs(d) / 2;
    }
    steps += kept[i];
  }
  EXPECT_NEAR(logs.at("loss"), se / steps, 1e-5 * logs.at("loss"));
  EXPECT_NEAR(logs.at("mae"), ae / steps, 1e-6);
}

TEST(SequenceMasks, WeightsOfAnotherShapeAreValueErrorsNamingTheShapes) {
  auto m = tagger(true);
  const auto error = [&](const Tensor& w) {
    return test::message_of([&] { m->evaluate(tokens(), labels(), {.batch_size = kN, .sample_weight = w}); });
  };
  EXPECT_NE(error(Tensor::ones(Shape{kN, kSteps + 1}))
                .find("sample_weight must hold one weight per example (shape (16,) or (16, 1)) or one per position "
                      "of the output (shape (16, 6)), got shape (16, 7)"),
            std::string::npos)
      << error(Tensor::ones(Shape{kN, kSteps + 1}));
  EXPECT_NE(error(Tensor::ones(Shape{kN, kSteps, 1})).find("got shape (16, 6, 1)"), std::string::npos);
}

TEST(SequenceMasks, AccuracyPickedByShapeIsEachKeptStepsArgmax) {
  // "accuracy" beside a loss that names no accuracy (mse on one-hot steps): Keras picks
  // categorical_accuracy by y_pred's last axis, each step's argmax, and leaves the masked steps out.
  auto m = tagger(true);
  m->compile(optimizers::Adam(1e-2), losses::MeanSquaredError(), {"accuracy"});
  const Tensor y = one_hot(labels().reshape(Shape{kN * kSteps}), kVocab).reshape(Shape{kN, kSteps, kVocab});
  const Logs logs = m->evaluate(tokens(), y, {.batch_size = kN});
  const Expected e = by_hand(*m, kept_steps());
  EXPECT_NEAR(logs.at("accuracy"), e.correct / e.weight_sum, 1e-6);
}

TEST(SequenceMasks, ACustomLoopsLossAndMetricsLeaveOutTheMaskedStepsAsFitDoes) {
  // Keras 3: loss(y, model(x)) reads y_pred's mask; here call_with_mask hands it over.
  for (bool functional : {false, true}) {
    SCOPED_TRACE(functional ? "Functional" : "Sequential");
    auto m = tagger(true, functional);
    const Logs logs = m->evaluate(tokens(), labels(), {.batch_size = kN});
    const Model::Output o = m->call_with_mask(tokens());
    ASSERT_TRUE(o.mask.defined());
    const std::vector<float> kept = kept_steps();
    std::vector<float> mask;
    for (auto v : cast(o.mask, DType::kF32).to_vector<float>()) mask.push_back(v);
    EXPECT_EQ(mask, kept) << "the mask marks the tokens that are not padding";
    EXPECT_EQ(o.output.to_vector<float>(), (*m)(tokens()).to_vector<float>());

    const losses::LossPtr sparse = losses::SparseCategoricalCrossentropy();
    const losses::Loss& loss = *sparse;
    EXPECT_NEAR(loss(labels(), o.output, Tensor(), o.mask).item(), logs.at("loss"), 1e-5 * logs.at("loss"));
    metrics::SparseCategoricalAccuracy accuracy;
    accuracy.update_state(labels(), o.output, Tensor(), o.mask);
    EXPECT_NEAR(accuracy.result(), logs.at("accuracy"), 1e-6);

    // Without the mask every step counts, as in a model without one.
    const Expected every = by_hand(*m, std::vector<float>(kept.size(), 1.0f));
    EXPECT_NEAR(loss(labels(), o.output).item(), every.loss_sum / every.weight_sum, 1e-5 * logs.at("loss"));
    EXPECT_GT(std::abs(loss(labels(), o.output).item() - logs.at("loss")), 1e-4 * logs.at("loss"));
    // "sum" and "none": the masked steps weigh 0 (not total / kept).
    const Expected e = by_hand(*m, kept);
    EXPECT_NEAR(loss(labels(), o.output, Tensor(), o.mask, losses::Reduction::kSum).item(), e.loss_sum,
                1e-5 * e.loss_sum);
    const Tensor none = loss(labels(), o.output, Tensor(), o.mask, losses::Reduction::kNone);
    const std::vector<float> each = none.to_vector<float>();
    ASSERT_EQ(each.size(), kept.size());
    for (std::size_t i = 0; i < kept.size(); ++i) {
      if (kept[i] == 0.0f) {
        EXPECT_EQ(each[i], 0.0f) << i;
      }
    }
  }
}

TEST(SequenceMasks, ACustomLoopsGradientLeavesTheMaskedStepsOut) {
  // The masked loss's gradient reaches no padded step: changing a padded step's label changes
  // neither the loss nor any gradient.
  auto m = tagger(true);
  const auto grads = [&](const Tensor& y) {
    GradientTape tape;
    const Model::Output o = m->call_with_mask(tokens(), {.training = true});
    const Tensor l = losses::SparseCategoricalCrossentropy()->operator()(y, o.output, Tensor(), o.mask);
    std::vector<std::vector<float>> out{l.to_vector<float>()};
    for (const Tensor& g : tape.gradient(l, m->trainable_variables())) out.push_back(g.to_vector<float>());
    return out;
  };
  std::vector<std::int64_t> y = labels().to_vector<std::int64_t>();
  const auto before = grads(labels());
  const std::vector<float> kept = kept_steps();
  for (std::size_t i = 0; i < y.size(); ++i)
    if (kept[i] == 0.0f) y[i] = (y[i] + 1) % kVocab;
  EXPECT_EQ(grads(Tensor::from_vector(y, Shape{kN, kSteps})), before);
}

}  // namespace
}  // namespace lockstep
