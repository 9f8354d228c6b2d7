// Keras' top-k and binary accuracies under MirroredStrategy: each replica's batch state is summed
// by the strategy, so evaluate over 2 replicas (batches 8, 8, 7 split 4/4, 4/4, 4/3) gives one
// device's numbers exactly, and those are the metric's on the model's predictions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {

struct Case {
  std::string loss;
  std::vector<std::string> names;  // compile's names, beside the objects
  std::vector<metrics::MetricPtr> objects;
  std::int64_t outputs;
};

Tensor targets_for(const std::string& loss, const Tensor& labels, std::int64_t classes) {
  if (loss == "sparse_categorical_crossentropy") return labels;
  if (loss == "categorical_crossentropy") return one_hot(labels, classes);
  return cast(greater(labels, Tensor::scalar(1, DType::kI64)), DType::kF32).reshape({labels.dim(0), 1});
}

TEST(AccuracyMetricsReplicas, EvaluateOnTwoReplicasGivesOneDevicesNumbersExactly) {
  const std::vector<Case> cases = {
      {"categorical_crossentropy",
       {"accuracy", "top_k_categorical_accuracy"},
       {std::make_shared<metrics::TopKCategoricalAccuracy>(2, "top2")},
       5},
      {"sparse_categorical_crossentropy",
       {"sparse_top_k_categorical_accuracy"},
       {std::make_shared<metrics::SparseTopKCategoricalAccuracy>(3, "top3")},
       5},
      {"binary_crossentropy", {"accuracy", "binary_accuracy"}, {std::make_shared<metrics::BinaryAccuracy>("high", 0.6)}, 1},
  };
  const Tensor x = test::random_uniform({23, 6}, 4);
  const Tensor labels = test::random_classification(23, 1, 5, 8).y;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.loss);
    set_random_seed(3);
    Sequential model({layers::Dense(8, "relu", 6), layers::Dense(c.outputs, c.outputs == 1 ? "sigmoid" : "softmax")});
    std::vector<metrics::MetricPtr> all;
    for (const auto& name : c.names) all.push_back(metrics::get(name, c.loss));
    for (const auto& m : c.objects) all.push_back(m);
    model.compile(optimizers::SGD(0.1), losses::get(c.loss), all);
    const Tensor y = targets_for(c.loss, labels, 5);
    const Logs one = model.evaluate(x, y, {.batch_size = 8});
    const Tensor p = model.predict(x, {.batch_size = 8});
    MirroredStrategy strategy({.num_cpu_devices = 2});
    model.distribute(strategy);
    const Logs two = model.evaluate(x, y, {.batch_size = 8});
    for (const auto& compiled : model.metrics()) {
      const metrics::MetricPtr& m = compiled.metric;
      SCOPED_TRACE(m->name());
      EXPECT_EQ(one.at(m->name()), two.at(m->name()));
      const metrics::MetricPtr direct = m->clone_empty();
      direct->update_state(y, p);
      EXPECT_DOUBLE_EQ(one.at(m->name()), direct->result());
      EXPECT_GT(direct->result(), 0.0);
    }
  }
}

}  // namespace
