// Keras' sample_weight and class_weight in fit and evaluate (training/sample_weights.hpp): Keras 3's
// arithmetic (each loss times its weight, the sum divided by the number of examples), the weights
// travelling with their rows to every replica, and the refusals of bad weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "common/mirrored_model.hpp"
#include "common/random_data.hpp"
#include "common/relative_error.hpp"
#include "lockstep/layers/dtype_policy.hpp"
#include "lockstep/lockstep.hpp"
#include "training/sample_weights.hpp"

namespace lockstep {
namespace {

using test::message_of;

constexpr std::int64_t kN = 48;
const test::Classification& data() {
  static const test::Classification d = test::random_classification(kN, 12, 4, 21);
  return d;
}

std::unique_ptr<Sequential> make_model(optimizers::OptimizerPtr optimizer = nullptr) {
  set_random_seed(5);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(8, "relu", 12), layers::Dropout(0.25), layers::Dense(4, "softmax")});
  m->compile(optimizer ? optimizer : optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(),
             {"accuracy"});
  return m;
}

Tensor floats(const std::vector<float>& v) {
  return Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())});
}

// Weights in [0, 2), the same for every run.
Tensor random_weights() { return test::random_uniform(Shape{kN}, 77, 0.0f, 2.0f); }

struct Trained {
  std::vector<std::vector<float>> weights;
  std::map<std::string, std::vector<double>> history;
};

Trained fit_on(int replicas, const FitOptions& o) {
  auto on = test::model_on_cpus(replicas, [] { return make_model(); });
  const History h = on.model->fit(data().x, data().y, o);
  return {test::weights_of(*on.model), h.history};
}

TEST(SampleWeight, AllOnesTrainTheBitsOfNoWeights) {
  for (int replicas : {0, 2}) {
    SCOPED_TRACE(replicas);
    const FitOptions plain{.epochs = 2, .batch_size = 10, .verbose = 0};
    FitOptions ones = plain;
    ones.sample_weight = Tensor::ones(Shape{kN});
    const Trained a = fit_on(replicas, plain), b = fit_on(replicas, ones);
    EXPECT_EQ(a.weights, b.weights);
    EXPECT_EQ(a.history.at("loss"), b.history.at("loss"));
    EXPECT_EQ(a.history.at("accuracy"), b.history.at("accuracy"));
  }
}

// Keras 3 divides the weighted sum by the number of examples: weights (2, 0, 1, ...) on x weigh
// as x with its first example twice and its second left out, which has as many examples. In
// evaluate's loss, and in a train step's gradients (a model without dropout, whose masks key rows).
TEST(SampleWeight, AWeightOfTwoCountsAnExampleTwiceAndZeroDropsIt) {
  const test::Classification& d = data();
  std::vector<float> w(kN, 1.0f);
  w[0] = 2.0f;
  w[1] = 0.0f;
  std::vector<float> xs = d.x.to_vector<float>();
  std::vector<std::int64_t> ys = d.y.to_vector<std::int64_t>();
  std::copy(xs.begin(), xs.begin() + 12, xs.begin() + 12);  // row 1 := row 0
  ys[1] = ys[0];
  const Tensor x2 = Tensor::from_vector(xs, Shape{kN, 12}), y2 = Tensor::from_vector(ys, Shape{kN});

  const auto make = [] {
    set_random_seed(5);
    auto m = std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 12), layers::Dense(4, "softmax")});
    m->compile(optimizers::SGD(0.5), losses::SparseCategoricalCrossentropy());
    return m;
  };
  auto a = make(), b = make();
  const Logs weighted = a->evaluate(d.x, d.y, {.batch_size = kN, .sample_weight = floats(w)});
  const Logs duplicated = b->evaluate(x2, y2, {.batch_size = kN});
  const Logs plain = a->evaluate(d.x, d.y, {.batch_size = kN});
  EXPECT_NEAR(weighted.at("loss"), duplicated.at("loss"), 1e-6 * duplicated.at("loss"));
  EXPECT_GT(std::abs(plain.at("loss") - weighted.at("loss")), 1e-4) << "the weights must change the loss";

  FitOptions o{.epochs = 2, .batch_size = kN, .shuffle = false, .verbose = 0};
  o.sample_weight = floats(w);
  const History ha = a->fit(d.x, d.y, o);
  o.sample_weight = Tensor();
  const History hb = b->fit(x2, y2, o);
  EXPECT_LE(test::max_rel_diff(test::weights_of(*a), test::weights_of(*b)), 1e-5);
  EXPECT_NEAR(ha.history.at("loss")[1], hb.history.at("loss")[1], 1e-6);
  EXPECT_NE(test::weights_of(*a), test::weights_of(*make()));
}

TEST(SampleWeight, ReplicasTrainWhatOneDeviceTrains) {
  FitOptions o{.epochs = 3, .batch_size = 10, .verbose = 0};  // batches of 10 and a last one of 8
  o.sample_weight = random_weights();
  const Trained one = fit_on(0, o);
  const FitOptions plain{.epochs = 3, .batch_size = 10, .verbose = 0};
  EXPECT_NE(one.weights, fit_on(0, plain).weights) << "the weights must change the training";
  for (int replicas : {1, 2, 3}) {
    const Trained r = fit_on(replicas, o);
    EXPECT_LE(test::max_rel_diff(r.weights, one.weights), 1e-5) << replicas << " replicas";
    for (std::size_t e = 0; e < 3; ++e)
      EXPECT_NEAR(r.history.at("loss")[e], one.history.at("loss")[e], 1e-5)
          << replicas << " replicas, epoch " << e;
  }
}

TEST(SampleWeight, ADatasetOfTriplesTrainsAsTheOption) {
  const test::Classification& d = data();
  const Tensor w = random_weights();
  FitOptions o{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};
  auto a = make_model();
  a->fit(data::Dataset::from_tensor_slices({d.x, d.y, w}).batch(8), o);
  auto b = make_model();
  o.sample_weight = w;
  b->fit(d.x, d.y, o);
  EXPECT_EQ(test::weights_of(*a), test::weights_of(*b));
  // evaluate: the dataset's weights, the option's, and (N, 1) weights alike.
  const Logs from_ds = a->evaluate(data::Dataset::from_tensor_slices({d.x, d.y, w}).batch(16));
  const Logs from_option = a->evaluate(d.x, d.y, {.batch_size = 16, .sample_weight = w});
  const Logs column = a->evaluate(d.x, d.y, {.batch_size = 16, .sample_weight = w.reshape(Shape{kN, 1})});
  EXPECT_EQ(from_ds.at("loss"), from_option.at("loss"));
  EXPECT_EQ(column.at("loss"), from_option.at("loss"));
}

// Keras 3 weighs only weighted_metrics: compile's metrics read every example alike.
TEST(SampleWeight, MetricsAreNotWeighted) {
  auto m = make_model();
  std::vector<float> w(kN, 0.0f);
  w[3] = 1.0f;
  const Logs weighted = m->evaluate(data().x, data().y, {.batch_size = 16, .sample_weight = floats(w)});
  const Logs plain = m->evaluate(data().x, data().y, {.batch_size = 16});
  EXPECT_EQ(weighted.at("accuracy"), plain.at("accuracy"));
  EXPECT_NE(weighted.at("loss"), plain.at("loss"));
}

// validation_split holds out the last rows with their weights: val_loss is their weighted loss.
TEST(SampleWeight, ValidationSplitKeepsTheHeldOutRowsWeights) {
  const test::Classification& d = data();
  const Tensor w = random_weights();
  auto m = make_model();
  FitOptions o{.epochs = 1, .batch_size = 8, .validation_split = 0.25, .verbose = 0};
  o.sample_weight = w;
  const History h = m->fit(d.x, d.y, o);
  const Logs held_out =
      m->evaluate(d.x.slice(36, kN), d.y.slice(36, kN), {.batch_size = 8, .sample_weight = w.slice(36, kN)});
  EXPECT_EQ(h.history.at("val_loss").back(), held_out.at("loss"));
}

// class_weight weighs only the rows fit trains on: Keras 3 splits first, so val_loss is the held-out
// rows' unweighted loss (Keras 3.15.1: 0.66707 unweighted, 2.0101 if they were weighted).
TEST(ClassWeight, ValidationSplitsHeldOutRowsAreNotWeighted) {
  const test::Classification& d = data();
  auto m = make_model();
  FitOptions o{.epochs = 1, .batch_size = 8, .validation_split = 0.25, .verbose = 0};
  o.class_weight = {{0, 5.0}, {1, 0.25}};
  const History h = m->fit(d.x, d.y, o);
  const Logs held_out = m->evaluate(d.x.slice(36, kN), d.y.slice(36, kN), {.batch_size = 8});
  EXPECT_EQ(h.history.at("val_loss").back(), held_out.at("loss"));
}

// Keras 3's class_weight_to_sample_weights: each example weighs its class's weight, 1 where the
// map has none; one-hot targets by their argmax; on tensors and on a dataset alike.
TEST(ClassWeight, EqualsTheSampleWeightOfEachExamplesClass) {
  const test::Classification& d = data();
  const std::map<int, double> class_weight{{0, 0.5}, {1, 3.0}, {3, 0.0}};  // class 2 weighs 1
  std::vector<float> w;
  for (std::int64_t c : d.y.to_vector<std::int64_t>())
    w.push_back(c == 0 ? 0.5f : c == 1 ? 3.0f : c == 3 ? 0.0f : 1.0f);
  FitOptions o{.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0};
  FitOptions by_class = o;
  by_class.class_weight = class_weight;
  FitOptions by_example = o;
  by_example.sample_weight = floats(w);
  auto a = make_model(), b = make_model(), c = make_model();
  a->fit(d.x, d.y, by_class);
  b->fit(d.x, d.y, by_example);
  c->fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(8), by_class);
  EXPECT_EQ(test::weights_of(*a), test::weights_of(*b));
  EXPECT_EQ(test::weights_of(*c), test::weights_of(*b));

  // One-hot targets: the argmax's weight.
  std::vector<float> one_hot(static_cast<std::size_t>(kN * 4), 0.0f);
  const std::vector<std::int64_t> labels = d.y.to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < kN; ++i)
    one_hot[static_cast<std::size_t>(i * 4 + labels[static_cast<std::size_t>(i)])] = 1.0f;
  EXPECT_EQ(
      detail::class_weights(Tensor::from_vector(one_hot, Shape{kN, 4}), class_weight).to_vector<float>(), w);
  // Class indices as floats, (N, 1), rounded half to even as np.round: 1.5 is class 2, 2.5 class 2.
  const Tensor column = Tensor::from_vector(std::vector<float>{0.0f, 1.4f, 1.5f, 2.5f, 3.0f}, Shape{5, 1});
  EXPECT_EQ(detail::class_weights(column, class_weight).to_vector<float>(),
            (std::vector<float>{0.5f, 3.0f, 1.0f, 1.0f, 0.0f}));
}

// A model of several outputs: one weight array weighs every output's loss (Keras replicates it
// over the outputs), or a dataset carries one per output; each output's loss log is weighted.
TEST(SampleWeight, OneArrayWeighsEveryOutputOfAModelOfSeveral) {
  const auto make = [] {
    set_random_seed(3);
    const KerasTensor in = Input({12}, "in");
    const KerasTensor h = call(layers::Dense(8, "relu"), in);
    auto cls = layers::Dense(4, "softmax");
    cls->set_name("cls");
    auto reg = layers::Dense(1);
    reg->set_name("reg");
    auto m = std::make_unique<Functional>(std::vector<KerasTensor>{in},
                                          std::vector<KerasTensor>{call(cls, h), call(reg, h)}, "two", 7);
    m->compile(optimizers::Adam(0.01),
               {{"cls", losses::SparseCategoricalCrossentropy()}, {"reg", losses::MeanSquaredError()}}, {},
               {{"cls", 1.0}, {"reg", 0.5}});
    return m;
  };
  const test::Classification& d = data();
  const Tensor reg = test::random_uniform(Shape{kN, 1}, 8);
  const Tensor w = random_weights();
  auto m = make();
  const Logs plain = m->evaluate({d.x}, {d.y, reg}, {.batch_size = 16});
  const Logs weighted = m->evaluate({d.x}, {d.y, reg}, {.batch_size = 16, .sample_weight = w});
  EXPECT_NE(weighted.at("cls_loss"), plain.at("cls_loss"));
  EXPECT_NE(weighted.at("reg_loss"), plain.at("reg_loss"));
  EXPECT_NEAR(weighted.at("loss"), weighted.at("cls_loss") + 0.5 * weighted.at("reg_loss"),
              1e-5 * weighted.at("loss"));
  // One per output in a dataset: the same weights twice give the one array's numbers.
  const Logs per_output = m->evaluate(data::Dataset::from_tensor_slices({d.x, d.y, reg, w, w}).batch(16));
  EXPECT_EQ(per_output.at("cls_loss"), weighted.at("cls_loss"));
  EXPECT_EQ(per_output.at("reg_loss"), weighted.at("reg_loss"));
  // Ones on the regression output alone leave its loss as without weights.
  const Logs cls_only =
      m->evaluate(data::Dataset::from_tensor_slices({d.x, d.y, reg, w, Tensor::ones(Shape{kN})}).batch(16));
  EXPECT_EQ(cls_only.at("reg_loss"), plain.at("reg_loss"));
  EXPECT_EQ(cls_only.at("cls_loss"), weighted.at("cls_loss"));
  // class_weight needs one output (Keras' words).
  FitOptions o{.verbose = 0};
  o.class_weight = {{0, 2.0}};
  EXPECT_NE(message_of([&] {
              m->fit({d.x}, {d.y, reg}, o);
            }).find("only supported for Models with a single output"),
            std::string::npos);
}

// Under mixed_float16 (a loss scale seeding the backward on the device), ones still train the
// bits of no weights, and other weights train.
TEST(SampleWeight, MixedPrecisionTrainsWithWeights) {
  mixed_precision::set_global_policy("mixed_float16");
  const FitOptions plain{.epochs = 2, .batch_size = 16, .verbose = 0};
  FitOptions ones = plain, random = plain;
  ones.sample_weight = Tensor::ones(Shape{kN});
  random.sample_weight = random_weights();
  const Trained a = fit_on(2, plain), b = fit_on(2, ones), c = fit_on(2, random);
  mixed_precision::set_global_policy("float32");
  EXPECT_EQ(a.weights, b.weights);
  EXPECT_EQ(a.history.at("loss"), b.history.at("loss"));
  EXPECT_NE(a.weights, c.weights);
  for (double loss : c.history.at("loss")) EXPECT_TRUE(std::isfinite(loss));
}

TEST(SampleWeight, BadWeightsAreValueErrorsNamingTheArgument) {
  const test::Classification& d = data();
  auto m = make_model();
  const auto fit_error = [&](const FitOptions& o) { return message_of([&] { m->fit(d.x, d.y, o); }); };
  FitOptions o{.verbose = 0};
  o.sample_weight = Tensor::ones(Shape{kN - 1});
  EXPECT_NE(fit_error(o).find("sample_weight has 47 weights but the data has 48 examples"), std::string::npos)
      << fit_error(o);
  o.sample_weight = Tensor::ones(Shape{kN, 2});
  EXPECT_NE(
      fit_error(o).find("sample_weight must hold one weight per example (shape (48,) or (48, 1)), got shape"),
      std::string::npos)
      << fit_error(o);
  std::vector<float> nan(kN, 1.0f);
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  o.sample_weight = floats(nan);
  EXPECT_NE(fit_error(o).find("sample_weight[5] is nan; every weight must be finite"), std::string::npos)
      << fit_error(o);
  o.sample_weight = Tensor::ones(Shape{kN});
  o.class_weight = {{1, 2.0}};
  EXPECT_NE(fit_error(o).find("You cannot `class_weight` and `sample_weight` at the same time."),
            std::string::npos);
  o.class_weight = {{1, std::numeric_limits<double>::infinity()}};
  o.sample_weight = Tensor();
  EXPECT_NE(fit_error(o).find("class_weight[1] is inf"), std::string::npos) << fit_error(o);
  // With a dataset the weights are its third component, not an option.
  const data::Dataset ds = data::Dataset::from_tensor_slices(d.x, d.y).batch(8);
  FitOptions with_option{.verbose = 0};
  with_option.sample_weight = Tensor::ones(Shape{kN});
  EXPECT_NE(message_of([&] {
              m->fit(ds, with_option);
            }).find("When providing `x` as a dataset, `sample_weight` should not be passed"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              m->evaluate(ds, {.sample_weight = Tensor::ones(Shape{kN})});
            }).find("When providing `x` as a dataset, `sample_weight` should not be passed"),
            std::string::npos);
  // class_weight on a dataset that has weights already.
  FitOptions by_class{.verbose = 0};
  by_class.class_weight = {{1, 2.0}};
  const data::Dataset triples =
      data::Dataset::from_tensor_slices({d.x, d.y, Tensor::ones(Shape{kN})}).batch(8);
  // (The map that adds class weights to a dataset's batches finds it, so it comes as the
  // pipeline's FunctionError, which carries the ValueError.)
  try {
    m->fit(triples, by_class);
    ADD_FAILURE() << "expected an error";
  } catch (const data::FunctionError& e) {
    EXPECT_NE(e.original_message().find("You cannot `class_weight` and `sample_weight`"), std::string::npos)
        << e.what();
  }
  // A dataset's weights of another shape, and a fourth component: named.
  const data::Dataset wide =
      data::Dataset::from_tensor_slices({d.x, d.y, Tensor::ones(Shape{kN, 3})}).batch(8);
  EXPECT_NE(message_of([&] {
              m->fit(wide, {.verbose = 0});
            }).find("sample_weight: a batch of 8 examples needs one weight"),
            std::string::npos)
      << message_of([&] { m->fit(wide, {.verbose = 0}); });
  const Tensor ones = Tensor::ones(Shape{kN});
  const data::Dataset four = data::Dataset::from_tensor_slices({d.x, d.y, ones, ones}).batch(8);
  EXPECT_NE(message_of([&] {
              m->evaluate(four);
            }).find("must hold 2 tensors (x, y), got 4 (or 3 with sample_weight)"),
            std::string::npos)
      << message_of([&] { m->evaluate(four); });
  // Negative weights are Keras' to allow: they train (against the example).
  std::vector<float> negative(kN, 1.0f);
  negative[0] = -1.0f;
  o.class_weight.clear();
  o.sample_weight = floats(negative);
  EXPECT_NO_THROW(m->fit(d.x, d.y, o));
}

}  // namespace
}  // namespace lockstep
