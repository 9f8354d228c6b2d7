// One table of lockstep's metrics (metric_config.hpp): every metric round-trips through Keras'
// serialised object, names resolve as Keras' compile resolves them, and an unknown or hostile
// identifier is a ValueError naming the problem.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "common/error_message.hpp"
#include "lockstep/metrics/metric_config.hpp"

namespace lockstep {
namespace {
using nlohmann::json;
using test::message_of;

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

const std::vector<std::string> kClasses{"Accuracy",
                                        "BinaryAccuracy",
                                        "CategoricalAccuracy",
                                        "SparseCategoricalAccuracy",
                                        "TopKCategoricalAccuracy",
                                        "SparseTopKCategoricalAccuracy",
                                        "MeanAbsoluteError",
                                        "MeanSquaredError",
                                        "Mean"};

json object(const std::string& cls, json config) {
  return {{"module", "keras.metrics"}, {"class_name", cls}, {"config", std::move(config)}, {"registered_name", nullptr}};
}

TEST(MetricConfig, EveryMetricRoundTripsThroughKerasObject) {
  for (const std::string& cls : kClasses) {
    SCOPED_TRACE(cls);
    const metrics::MetricPtr made = metrics::deserialize(json{{"class_name", cls}, {"config", {{"name", "m"}}}});
    EXPECT_EQ(made->class_name(), cls);
    EXPECT_EQ(made->name(), "m");
    const json saved = metrics::serialize(*made);
    EXPECT_EQ(saved.at("config").at("dtype"), "float32");
    const metrics::MetricPtr again = metrics::deserialize(saved);
    EXPECT_EQ(again->class_name(), cls);
    EXPECT_EQ(metrics::serialize(*again), saved);
    // A default name where the config has none: the class's Keras name.
    EXPECT_NE(metrics::deserialize(json{{"class_name", cls}})->name(), "");
  }
}

// The objects Keras 3.15.1's keras.metrics.serialize writes, key for key; options come back.
TEST(MetricConfig, OptionsAreWrittenAsKerasWritesThemAndComeBack) {
  EXPECT_EQ(metrics::serialize(metrics::TopKCategoricalAccuracy(3)),
            object("TopKCategoricalAccuracy", {{"name", "top_k_categorical_accuracy"}, {"dtype", "float32"}, {"k", 3}}));
  EXPECT_EQ(metrics::serialize(metrics::SparseTopKCategoricalAccuracy()),
            object("SparseTopKCategoricalAccuracy",
                   {{"name", "sparse_top_k_categorical_accuracy"}, {"dtype", "float32"}, {"k", 5}}));
  EXPECT_EQ(metrics::serialize(metrics::BinaryAccuracy("b", 0.7)),
            object("BinaryAccuracy", {{"name", "b"}, {"dtype", "float32"}, {"threshold", 0.7}}));
  EXPECT_EQ(metrics::serialize(metrics::MeanAbsoluteError()),
            object("MeanAbsoluteError", {{"name", "mean_absolute_error"}, {"dtype", "float32"}}));
  const auto k_of = [](const json& j) {
    return std::dynamic_pointer_cast<metrics::SparseTopKCategoricalAccuracy>(metrics::deserialize(j))->k();
  };
  EXPECT_EQ(k_of(object("SparseTopKCategoricalAccuracy", {{"k", 2}, {"from_sorted_ids", false}})), 2);
  EXPECT_EQ(k_of(object("SparseTopKCategoricalAccuracy", {{"k", nullptr}})), 5);  // null: the default
  const auto threshold = std::dynamic_pointer_cast<metrics::BinaryAccuracy>(
      metrics::deserialize(object("BinaryAccuracy", {{"threshold", 0.25}, {"dtype", nullptr}})));
  EXPECT_EQ(threshold->threshold(), 0.25);
  EXPECT_EQ(threshold->name(), "binary_accuracy");
}

TEST(MetricConfig, NamesAreKerasNamesAndKeepTheNameGiven) {
  const auto made = [](const std::string& name) { return metrics::deserialize(name); };
  EXPECT_EQ(made("top_k_categorical_accuracy")->class_name(), "TopKCategoricalAccuracy");
  EXPECT_EQ(std::dynamic_pointer_cast<metrics::TopKCategoricalAccuracy>(made("top_k_categorical_accuracy"))->k(), 5);
  EXPECT_EQ(made("sparse_top_k_categorical_accuracy")->class_name(), "SparseTopKCategoricalAccuracy");
  EXPECT_EQ(made("binary_accuracy")->class_name(), "BinaryAccuracy");
  EXPECT_EQ(made("mae")->class_name(), "MeanAbsoluteError");
  EXPECT_EQ(made("mae")->name(), "mae");
  EXPECT_EQ(made("MSE")->class_name(), "MeanSquaredError");
  // A class name as a string, as Keras' compile takes it, named by that string.
  EXPECT_EQ(made("TopKCategoricalAccuracy")->class_name(), "TopKCategoricalAccuracy");
  EXPECT_EQ(made("TopKCategoricalAccuracy")->name(), "TopKCategoricalAccuracy");
}

// Keras 3 picks "accuracy" by the targets' shapes; lockstep by the loss whose targets they are.
TEST(MetricConfig, AccuracyIsTheOneThatFitsTheLoss) {
  const auto cls = [](const std::string& name, const std::string& loss) {
    const metrics::MetricPtr m = metrics::get(name, loss);
    EXPECT_EQ(m->name(), name);
    return m->class_name();
  };
  EXPECT_EQ(cls("accuracy", "binary_crossentropy"), "BinaryAccuracy");
  EXPECT_EQ(cls("acc", "categorical_crossentropy"), "CategoricalAccuracy");
  EXPECT_EQ(cls("accuracy", "sparse_categorical_crossentropy"), "SparseCategoricalAccuracy");
  EXPECT_EQ(cls("ACC", "sparse_categorical_crossentropy"), "SparseCategoricalAccuracy");
  // Any other loss: picked by the batch's shapes, as Keras picks; no Keras class (never Accuracy).
  EXPECT_EQ(cls("accuracy", "mean_squared_error"), "");
  EXPECT_NE(std::dynamic_pointer_cast<metrics::AccuracyByShape>(metrics::get("accuracy", "mse")), nullptr);
  EXPECT_EQ(metrics::deserialize("accuracy", "binary_crossentropy")->class_name(), "BinaryAccuracy");
}

TEST(MetricConfig, UnknownClassesAndNamesAreRefusedListingWhatExists) {
  std::string m = message_of([] { (void)metrics::deserialize(json{{"class_name", "AUC"}, {"config", json::object()}}); });
  EXPECT_HAS(m, "lockstep does not support keras.metrics.AUC yet (it has Accuracy, BinaryAccuracy");
  EXPECT_HAS(m, "SparseTopKCategoricalAccuracy");
  m = message_of([] { (void)metrics::deserialize("f1_score"); });
  EXPECT_HAS(m, "unknown metric 'f1_score': lockstep has acc, accuracy, binary_accuracy");
  EXPECT_HAS(m, "top_k_categorical_accuracy");
  EXPECT_HAS(message_of([] { (void)metrics::deserialize(json(5)); }), "a metric is a name or Keras'");
  EXPECT_HAS(message_of([] { (void)metrics::deserialize(json{{"config", json::object()}}); }),
             "a metric is a name or Keras'");
}

TEST(MetricConfig, HostileConfigsAreRefusedNamingTheOption) {
  const auto refused = [](const std::string& cls, const json& config) {
    return message_of([&] { (void)metrics::deserialize(object(cls, config)); });
  };
  for (const json& k : {json(0), json(-3), json(2.5), json("3"), json(true)}) {
    EXPECT_HAS(refused("TopKCategoricalAccuracy", {{"k", k}}),
               "metric TopKCategoricalAccuracy: argument k=" + k.dump() + " must be an integer >= 1");
    EXPECT_HAS(refused("SparseTopKCategoricalAccuracy", {{"k", k}}), "SparseTopKCategoricalAccuracy: argument k=");
  }
  EXPECT_HAS(refused("BinaryAccuracy", {{"threshold", "nan"}}),
             "metric BinaryAccuracy: argument threshold=\"nan\" must be a finite number");
  EXPECT_HAS(refused("BinaryAccuracy", {{"threshold", std::numeric_limits<double>::quiet_NaN()}}),
             "must be a finite number");  // a NaN a C++ caller put in the config
  EXPECT_HAS(refused("SparseTopKCategoricalAccuracy", {{"from_sorted_ids", true}}),
             "metric SparseTopKCategoricalAccuracy: argument from_sorted_ids=true is not supported");
  EXPECT_HAS(refused("Accuracy", {{"dtype", "float16"}}), "metric Accuracy: argument dtype=\"float16\" is not supported");
  EXPECT_HAS(refused("Mean", {{"k", 3}}), "metric Mean: argument k=3 is not supported");
  EXPECT_HAS(refused("Mean", {{"name", 3}}), "metric Mean: argument name=3 must be a string");
  EXPECT_HAS(refused("Mean", json::array()), "metric Mean: config [] is not an object");
}

// Every class, table-driven: what serialize writes (each option away from its default) is what
// deserialize reads back, an unknown key is refused naming the class, the key and its value, and
// Keras' "off" (null or false) for a key the class has not passes. A key serialize writes that the
// reads leave fails here.
TEST(MetricConfig, WhatSerializeWritesDeserializeReadsAndNothingElse) {
  const std::vector<metrics::MetricPtr> all = {std::make_shared<metrics::Accuracy>("a"),
                                               std::make_shared<metrics::BinaryAccuracy>("b", 0.7),
                                               std::make_shared<metrics::CategoricalAccuracy>("c"),
                                               std::make_shared<metrics::SparseCategoricalAccuracy>("s"),
                                               std::make_shared<metrics::TopKCategoricalAccuracy>(3, "t"),
                                               std::make_shared<metrics::SparseTopKCategoricalAccuracy>(2, "st"),
                                               std::make_shared<metrics::MeanAbsoluteError>("mae"),
                                               std::make_shared<metrics::MeanSquaredError>("mse"),
                                               std::make_shared<metrics::Mean>("m")};
  ASSERT_EQ(all.size(), kClasses.size());
  for (const auto& metric : all) {
    const std::string cls = metric->class_name();
    SCOPED_TRACE(cls);
    const json written = metrics::serialize(*metric);
    const metrics::MetricPtr back = metrics::deserialize(written);
    EXPECT_EQ(metrics::serialize(*back), written);
    EXPECT_EQ(back->options(), metric->options());
    json extra = written;
    extra["config"]["bogus"] = 1.5;
    EXPECT_HAS(message_of([&] { (void)metrics::deserialize(extra); }),
               "metric " + cls + ": argument bogus=1.5 is not supported");
    extra["config"]["bogus"] = nullptr;
    extra["config"]["unused"] = false;
    EXPECT_EQ(metrics::serialize(*metrics::deserialize(extra)), written);
  }
}

// What a .keras compile config lists: the name compile took where it makes the same metric again.
TEST(MetricConfig, TheIdentifierIsTheNameWhereItMakesTheSameMetric) {
  EXPECT_EQ(metrics::identifier(*metrics::get("accuracy", "categorical_crossentropy"), "categorical_crossentropy"),
            json("accuracy"));
  EXPECT_EQ(metrics::identifier(metrics::TopKCategoricalAccuracy(), ""), json("top_k_categorical_accuracy"));
  EXPECT_EQ(metrics::identifier(metrics::TopKCategoricalAccuracy(3), ""),
            metrics::serialize(metrics::TopKCategoricalAccuracy(3)));
  EXPECT_EQ(metrics::identifier(metrics::BinaryAccuracy("accuracy"), "categorical_crossentropy"),
            metrics::serialize(metrics::BinaryAccuracy("accuracy")));
  EXPECT_EQ(metrics::identifier(metrics::CategoricalAccuracy("cat"), ""),
            metrics::serialize(metrics::CategoricalAccuracy("cat")));
}

}  // namespace
}  // namespace lockstep
