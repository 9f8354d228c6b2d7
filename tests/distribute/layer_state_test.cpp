// Layer state under a strategy: kOnRead variables (TF's replica semantics: each replica updates
// its own copy, reading outside the replicas aggregates), layers that all-reduce through
// CallContext::replica, and evaluate/predict split over the replicas.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <random>

#include "lockstep/io/checkpoint.hpp"
#include "lockstep/lockstep.hpp"
#include "common/random_data.hpp"


using namespace lockstep;
using namespace lockstep::distribute;

namespace {

VariableOptions on_read(const char* name, VariableAggregation aggregation) {
  return {.name = name,
          .trainable = false,
          .synchronization = VariableSynchronization::kOnRead,
          .aggregation = aggregation};
}

float scalar(const Tensor& t) { return t.item(); }

// Passes its input through; counts the examples it saw in training (or in every call), a
// metric-style total.
class ExampleCounter final : public layers::Layer {
 public:
  explicit ExampleCounter(bool also_inference = false) : Layer("counter"), also_inference_(also_inference) {}
  std::string class_name() const override { return "ExampleCounter"; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext& ctx) const override {
    if (ctx.training || also_inference_) seen_.assign_add(Tensor::full({1}, static_cast<double>(x.dim(0))));
    return x;
  }
  const Variable& seen() const { return seen_; }

 protected:
  void build_impl(const Shape&, std::uint64_t seed) override {
    seen_ = add_weight(Shape{1}, layers::Initializer{"zeros"}, seed, on_read("seen", VariableAggregation::kSum));
  }

 private:
  bool also_inference_;
  Variable seen_;
};

// Subtracts the batch mean over the GLOBAL batch: under a strategy the per-replica sums are
// all-reduced, as SyncBatchNormalization does with its statistics.
class GlobalCentering final : public layers::Layer {
 public:
  GlobalCentering() : Layer("centering") {}
  std::string class_name() const override { return "GlobalCentering"; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext& ctx) const override {
    Tensor total = sum(x, 0);
    Tensor count = Tensor::full({1}, static_cast<double>(x.dim(0)));
    if (ctx.replica) {
      total = ctx.replica->all_reduce(ReduceOp::kSum, total);
      count = ctx.replica->all_reduce(ReduceOp::kSum, count);
    }
    return sub(x, div(total, count));
  }
};

Tensor random_labels(std::int64_t n, std::int64_t classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(classes));
  return Tensor::from_vector(v, {n});
}

TEST(LayerState, OnReadCopiesAreUpdatedPerReplicaAndAggregatedOnRead) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  auto guard = strategy.scope();
  Variable total(Tensor::zeros({1}), on_read("total", VariableAggregation::kSum));
  Variable mean(Tensor::zeros({1}), on_read("mean", VariableAggregation::kMean));
  Variable first(Tensor::zeros({1}), on_read("first", VariableAggregation::kOnlyFirstReplica));
  ASSERT_EQ(total.num_copies(), 2);
  strategy.run_void([&](ReplicaContext& ctx) {
    const double mine = ctx.replica_id_in_sync_group() == 0 ? 1.0 : 3.0;
    total.assign_add(Tensor::full({1}, mine));
    mean.assign(Tensor::full({1}, mine));
    first.assign(Tensor::full({1}, mine));
    // Inside a replica, a read is that replica's own copy.
    EXPECT_EQ(scalar(total.read_value()), mine);
  });
  EXPECT_EQ(scalar(total.copy(0)), 1.0f);
  EXPECT_EQ(scalar(total.copy(1)), 3.0f);
  EXPECT_EQ(scalar(total.read_value()), 4.0f);  // sum of the copies
  EXPECT_EQ(scalar(mean.read_value()), 2.0f);   // their mean
  EXPECT_EQ(scalar(first.read_value()), 1.0f);  // replica 0's
  // kOnRead copies differ by design: the drift check leaves them alone.
  EXPECT_NO_THROW(strategy.check_mirrored({total, mean, first}));
  // Assigning outside the replicas: TF divides a kSum value over the copies.
  total.assign(Tensor::full({1}, 10.0));
  EXPECT_EQ(scalar(total.copy(0)), 5.0f);
  EXPECT_EQ(scalar(total.copy(1)), 5.0f);
  EXPECT_EQ(scalar(total.read_value()), 10.0f);
  mean.assign(Tensor::full({1}, 7.0));
  EXPECT_EQ(scalar(mean.copy(1)), 7.0f);
  EXPECT_EQ(scalar(mean.read_value()), 7.0f);
}

TEST(LayerState, MirroringAnOnReadSumKeepsItsValue) {
  Variable total(Tensor::full({1}, 6.0), on_read("total", VariableAggregation::kSum));
  MirroredStrategy strategy({.num_cpu_devices = 3});
  strategy.mirror_variables({total});
  EXPECT_EQ(scalar(total.read_value()), 6.0f);
  EXPECT_EQ(scalar(total.copy(2)), 0.0f);
}

TEST(LayerState, OnReadRulesAreTensorFlows) {
  EXPECT_THROW(Variable(Tensor::zeros({1}), VariableOptions{.name = "v",
                                                            .trainable = true,
                                                            .synchronization = VariableSynchronization::kOnRead,
                                                            .aggregation = VariableAggregation::kSum}),
               ValueError);
  EXPECT_THROW(Variable(Tensor::zeros({1}), on_read("v", VariableAggregation::kNone)), ValueError);
}

TEST(LayerState, LayerStateUpdatedDuringFitIsPerReplicaAndSumsToTheGlobalCount) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  auto guard = strategy.scope();
  auto counter = std::make_shared<ExampleCounter>();
  Sequential model({layers::Dense(8, "relu", /*input_dim=*/5), counter, layers::Dense(3, "softmax")});
  model.compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  // 5 steps of a global batch of 9: the replicas take 5 and 4 rows.
  const Tensor x = test::random_uniform({45, 5}, 1);
  const Tensor y = random_labels(45, 3, 2);
  model.fit(x, y, {.epochs = 1, .batch_size = 9, .shuffle = false, .verbose = 0});
  EXPECT_EQ(scalar(counter->seen().read_value()), 45.0f);
  EXPECT_EQ(scalar(counter->seen().copy(0)), 25.0f);
  EXPECT_EQ(scalar(counter->seen().copy(1)), 20.0f);
  // Not trainable: the optimizer never sees it, and the trainable copies stay identical.
  for (const auto& v : model.trainable_variables()) EXPECT_NE(v.name(), counter->seen().name());
  EXPECT_NO_THROW(strategy.check_mirrored(model.variables()));

  // A checkpoint holds the aggregate; loading it restores the aggregate (split over the copies).
  const auto dir = std::filesystem::temp_directory_path() / ("lockstep_layer_state_" + std::to_string(::getpid()));
  io::save_checkpoint((dir / "ck").string(), model.variables(), nullptr, io::TrainingState{});
  counter->seen().assign(Tensor::zeros({1}));
  io::load_checkpoint((dir / "ck").string(), model.variables(), nullptr);
  EXPECT_EQ(scalar(counter->seen().read_value()), 45.0f);
  std::filesystem::remove_all(dir);
}

TEST(LayerState, LayerAllReducesThroughCallContextLikeSyncBatchNorm) {
  GlobalCentering layer;
  const Tensor x = test::random_uniform({7, 4}, 3);
  const Tensor expected = layer.call(x, layers::CallContext{});
  MirroredStrategy strategy({.num_cpu_devices = 3});
  const auto slices = data::split_batch_for_replicas({x}, 3);
  auto outs = strategy.run([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
    return layer.call(slices[r][0], layers::CallContext{.replica = &ctx});
  });
  const auto got = strategy.gather(outs).to_vector<float>();
  const auto want = expected.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << i;
}

TEST(LayerState, EvaluateAndPredictSplitOverReplicasMatchOneDevice) {
  // The same weights without and with a strategy; 23 examples in batches of 8 (8, 8, 7).
  auto counter = std::make_shared<ExampleCounter>(/*also_inference=*/true);
  Sequential model({layers::Dense(16, "relu", /*input_dim=*/6), std::make_shared<GlobalCentering>(), counter,
                    layers::Dense(4, "softmax")});
  model.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const Tensor x = test::random_uniform({23, 6}, 4);
  const Tensor y = random_labels(23, 4, 5);
  // Inside a batch the centering uses the batch's mean: splitting must not change it.
  const Logs one = model.evaluate(x, y, {.batch_size = 8});
  const Tensor p1 = model.predict(x, {.batch_size = 8});
  MirroredStrategy strategy({.num_cpu_devices = 2});
  model.distribute(strategy);
  counter->seen().assign(Tensor::zeros({1}));
  const Logs two = model.evaluate(x, y, {.batch_size = 8});
  const Tensor p2 = model.predict(x, {.batch_size = 8});
  // Both replicas computed: batches of 8, 8, 7 split 4/4, 4/4, 4/3, twice (evaluate, predict).
  EXPECT_EQ(scalar(counter->seen().copy(0)), 24.0f);
  EXPECT_EQ(scalar(counter->seen().copy(1)), 22.0f);
  EXPECT_NEAR(one.at("loss"), two.at("loss"), 1e-6);
  EXPECT_EQ(one.at("accuracy"), two.at("accuracy"));
  ASSERT_EQ(p1.shape(), p2.shape());
  const auto a = p1.to_vector<float>(), b = p2.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f) << i;
}

}  // namespace
