// BatchNormalization under MirroredStrategy: synchronized=true makes N replicas compute what
// one device would (weights and moving statistics), an uneven split and an empty slice
// included; synchronized=false normalises each replica's slice on its own and keeps a moving
// average per replica, read as their mean.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "lockstep/lockstep.hpp"
#include "common/random_data.hpp"


using namespace lockstep;
using namespace lockstep::distribute;

namespace {

std::unique_ptr<Model> make_model() {
  set_random_seed(21);
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      // No biases before the normalisations: their gradients would be 0 up to rounding.
      layers::Input({5, 5, 2}),
      layers::Conv2D({.filters = 4, .kernel_size = {3, 3}, .padding = "same", .use_bias = false}),
      layers::BatchNormalization({.momentum = 0.9f, .synchronized = true}), layers::Activation("relu"),
      layers::Flatten(), layers::Dense({.units = 6, .use_bias = false}), layers::BatchNormalization({.synchronized = true}),
      layers::Dense(3, "softmax")});
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

// A residual network in the functional API: Conv-SyncBN-ReLU-Conv-SyncBN + a 1x1 projection
// shortcut with SyncBN, Add, ReLU, then a second block with the identity shortcut.
std::unique_ptr<Model> make_residual_model() {
  set_random_seed(22);
  const auto conv_bn = [](const KerasTensor& x, std::int64_t filters, std::int64_t kernel) {
    return call(layers::BatchNormalization({.momentum = 0.9f, .synchronized = true}),
                call(layers::Conv2D({.filters = filters, .kernel_size = {kernel, kernel}, .padding = "same",
                                     .use_bias = false}),
                     x));
  };
  const auto relu = [](const KerasTensor& x) { return call(layers::Activation("relu"), x); };
  const KerasTensor in = Input({5, 5, 2});
  KerasTensor x = relu(call(layers::Add(), {conv_bn(in, 4, 1), conv_bn(relu(conv_bn(in, 4, 3)), 4, 3)}));
  x = relu(call(layers::Add(), {x, conv_bn(relu(conv_bn(x, 4, 3)), 4, 3)}));
  auto m = std::make_unique<Functional>(in, call(layers::Dense(3, "softmax"), call(layers::GlobalAveragePooling2D(), x)));
  m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
};

// Trains on global batches of 10, 7 and 2 (on 3 replicas: 4/3/3, 3/2/2 and 1/1/0 rows), `rounds`
// times over.
Trained train_model(int replicas, const std::function<std::unique_ptr<Model>()>& make, int rounds = 1) {
  std::unique_ptr<MirroredStrategy> strategy;
  std::unique_ptr<Model> model;
  if (replicas > 0) {
    strategy = std::make_unique<MirroredStrategy>(MirroredOptions{.num_cpu_devices = replicas});
    auto scope = strategy->scope();
    model = make();
  } else {
    model = make();
  }
  Trained out;
  for (int round = 0; round < rounds; ++round) {
    std::uint64_t seed = 1;
    for (std::int64_t n : {10, 7, 2}) {
      std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>((i * 7 + seed) % 3);
      out.losses.push_back(
          model->train_step(test::random_uniform({n, 5, 5, 2}, seed++, 0.0f, 2.0f), Tensor::from_vector(labels, {n})));
    }
  }
  if (strategy) {
    strategy->check_mirrored(model->variables());
    // Synchronised: every replica's moving statistics are the same.
    for (const auto& v : model->variables())
      for (int r = 1; r < v.num_copies(); ++r)
        EXPECT_TRUE(v.copy(r).bitwise_equal(v.copy(0))) << v.name() << " copy " << r;
  }
  for (const auto& v : model->variables()) out.weights.push_back(v.read_value().to_vector<float>());
  return out;
}

// Within 2e-5 of each variable's largest magnitude. The batch of 2 rows is normalised to +-1 per
// channel whatever its values, so the Dense layer's normalisation hands back an input gradient
// that is a difference of nearly equal terms: one float32 rounding of the all-reduced sums (3
// replicas) against the one device's shows there, and flows into every earlier variable. Without
// that batch both agree within 4e-6.
void expect_replicas_match_one_device(const std::function<std::unique_ptr<Model>()>& make, int rounds) {
  const auto reference = train_model(0, make, rounds).weights;
  for (int n : {1, 3}) {
    const auto w = train_model(n, make, rounds).weights;
    ASSERT_EQ(w.size(), reference.size());
    for (std::size_t t = 0; t < w.size(); ++t) {
      double scale = 1e-30;
      for (float v : reference[t]) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      for (std::size_t i = 0; i < w[t].size(); ++i)
        EXPECT_LE(std::fabs(w[t][i] - reference[t][i]), 2e-5 * scale) << n << " replicas, variable " << t << "[" << i << "]";
    }
  }
}

TEST(SyncBatchNormalization, ThreeReplicasWithAnUnevenSplitEndWithOneDevicesWeightsAndMovingStatistics) {
  expect_replicas_match_one_device(make_model, 1);
}

TEST(SyncBatchNormalization, AResidualFunctionalModelTrainsAndOneOrThreeReplicasEndWithOneDevicesWeights) {
  // Its loss falls: the mean over the last pass of the batches is below the first's.
  const auto losses = train_model(0, make_residual_model, 4).losses;
  const double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[9] + losses[10] + losses[11]) / 3;
  EXPECT_LT(last, 0.9 * first) << "first pass " << first << ", last pass " << last;
  expect_replicas_match_one_device(make_residual_model, 4);
}

// The layer called in training on each replica's slice, as fit does; the outputs gathered.
Tensor call_on_replicas(MirroredStrategy& strategy, const layers::Layer& layer, const Tensor& x) {
  const auto slices = data::split_batch_for_replicas({x}, strategy.num_replicas_in_sync());
  auto outs = strategy.run([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.replica_id_in_sync_group());
    return layer.call(slices[r][0], layers::CallContext{.training = true, .replica = &ctx});
  });
  return strategy.gather(outs);
}

TEST(BatchNormalization, UnsynchronisedReplicasNormaliseTheirOwnSliceAndAverageTheirMovingStatistics) {
  const Tensor x = test::random_uniform({9, 2}, 7, 0.0f, 4.0f);
  MirroredStrategy strategy({.num_cpu_devices = 3});
  auto bn = layers::BatchNormalization({.momentum = 0.5f});
  bn->build(Shape{-1, 2}, 0);
  strategy.mirror_variables(bn->variables());
  const Tensor got = call_on_replicas(strategy, *bn, x);
  // Each slice of 3 rows normalised with its own statistics, as a lone device would.
  const auto slices = data::split_batch_for_replicas({x}, 3);
  auto alone = layers::BatchNormalization({.momentum = 0.5f});
  alone->build(Shape{-1, 2}, 0);
  auto* bn_layer = dynamic_cast<layers::BatchNormalizationLayer*>(bn.get());
  std::vector<float> want, mean_of_copies(2, 0.0f);
  for (int r = 0; r < 3; ++r) {
    auto* a = dynamic_cast<layers::BatchNormalizationLayer*>(alone.get());
    a->moving_mean().assign(Tensor::zeros({2}));
    for (float v : alone->call(slices[static_cast<std::size_t>(r)][0], layers::CallContext{.training = true}).to_vector<float>())
      want.push_back(v);
    // Replica r's copy moved toward its own slice's mean: 0.5 * mean(slice r).
    const auto copy = bn_layer->moving_mean().copy(r).to_vector<float>();
    const auto own = a->moving_mean().read_value().to_vector<float>();
    for (int c = 0; c < 2; ++c) {
      EXPECT_NEAR(copy[static_cast<std::size_t>(c)], own[static_cast<std::size_t>(c)], 1e-6) << "replica " << r;
      mean_of_copies[static_cast<std::size_t>(c)] += own[static_cast<std::size_t>(c)] / 3.0f;
    }
  }
  const auto g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-5) << i;
  // Read outside the replicas, the moving mean is the mean of the copies.
  const auto read = bn_layer->moving_mean().read_value().to_vector<float>();
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(read[static_cast<std::size_t>(c)], mean_of_copies[static_cast<std::size_t>(c)], 1e-6);

  // Synchronised, the same call normalises with the whole batch's statistics on every replica.
  auto sync = layers::BatchNormalization({.momentum = 0.5f, .synchronized = true});
  sync->build(Shape{-1, 2}, 0);
  strategy.mirror_variables(sync->variables());
  const auto s = call_on_replicas(strategy, *sync, x).to_vector<float>();
  auto whole = layers::BatchNormalization({.momentum = 0.5f});
  whole->build(Shape{-1, 2}, 0);
  const auto w = whole->call(x, layers::CallContext{.training = true}).to_vector<float>();
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(s[i], w[i], 1e-5) << i;
}

}  // namespace
