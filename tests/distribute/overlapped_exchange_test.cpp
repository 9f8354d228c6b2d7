// The gradient exchange overlapped with the backward pass (DDP's Reducer hooks): fit's train
// step hands each gradient to its bucket as soon as the tape has made it final, and each bucket's
// collective starts then. What a user relies on: the weights, slots and step count are the same
// bits as with the exchange started after the backward pass (MirroredOptions::overlap_gradients false), for
// the all-reduce, the sharded update's reduce-scatter and loss scaling, over several buckets.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> slots;
  std::int64_t iterations = 0;
  std::size_t buckets = 0;
  std::size_t started_early = 0;  // by replica 0's reducer, over every step
};

struct Case {
  const char* name;
  bool shard;
  optimizers::OptimizerPtr (*make)();
  bool in_place = false;  // a sharded update reads the gradients in place: nothing is exchanged
};

optimizers::OptimizerPtr adam() { return optimizers::Adam(1e-2); }
optimizers::OptimizerPtr adam_global_clipnorm() {  // needs every gradient: all-reduced, not sharded
  optimizers::AdamOptions o;
  o.learning_rate = 1e-2;
  o.global_clipnorm = 0.05;
  return optimizers::Adam(o);
}
optimizers::OptimizerPtr loss_scaled_sgd() {
  return optimizers::LossScale(optimizers::SGD(0.1, 0.9), {.initial_scale = 1024});
}

// Six global batches of 12 through train_step on `replicas` CPU replicas, with 128-byte buckets
// (the last layer and the bias before it, the middle kernel, the first bias, the first kernel).
Trained train(int replicas, bool overlap, const Case& c) {
  MirroredStrategy strategy({.num_cpu_devices = replicas,
                             .bucket_cap_bytes = 128,
                             .shard_optimizer_update = c.shard,
                             .overlap_gradients = overlap,
                             .gradients_in_place = c.in_place});
  const auto d = test::random_classification(72, 6, 3, 23);
  auto scope = strategy.scope();
  set_random_seed(9);
  Sequential model({layers::Dense(8, "relu", 6), layers::Dropout(0.25), layers::Dense(5, "tanh"), layers::Dense(3, "softmax")});
  auto opt = c.make();
  model.compile(opt, losses::SparseCategoricalCrossentropy(), {"accuracy"});
  for (std::int64_t b = 0; b < 72; b += 12) model.train_step(d.x.slice(b, b + 12), d.y.slice(b, b + 12));
  strategy.check_mirrored(model.variables());
  Trained t;
  for (const auto& v : model.variables()) t.weights.push_back(v.value().to_vector<float>());
  model.gather_optimizer_slots();
  for (const auto& v : model.trainable_variables())
    for (const auto& [name, s] : opt->slots(v)) t.slots.push_back(s.to_vector<float>());
  t.iterations = opt->iterations();
  t.buckets = strategy.gradient_reducer(0).buckets().size();
  t.started_early = strategy.gradient_reducer(0).buckets_started_early();
  return t;
}

}  // namespace

TEST(OverlappedExchange, FitStepsGiveTheSameBitsAsExchangingAfterBackward) {
  const Case cases[] = {{"Adam, sharded update (reduce-scatter)", true, adam},
                        {"Adam, unsharded (all-reduce)", false, adam},
                        {"Adam + global_clipnorm (all-reduce)", true, adam_global_clipnorm},
                        {"LossScale(SGD momentum) (all-reduce, then unscale)", true, loss_scaled_sgd},
                        {"Adam, sharded update, gradients read in place", true, adam, true}};
  for (const Case& c : cases) {
    for (int replicas : {2, 3}) {
      SCOPED_TRACE(std::string(c.name) + ", replicas = " + std::to_string(replicas));
      const Trained after = train(replicas, false, c);
      const Trained overlapped = train(replicas, true, c);
      ASSERT_EQ(after.buckets, 4u);
      EXPECT_EQ(after.started_early, 0u) << "with the overlap off every bucket starts after the backward pass";
      if (c.in_place)
        EXPECT_EQ(overlapped.started_early, 0u) << "gradients read in place are not exchanged: nothing starts";
      else
        EXPECT_EQ(overlapped.started_early, 6 * (overlapped.buckets - 1))
            << "every bucket but the last of every step starts during backward";
      EXPECT_EQ(overlapped.iterations, 6);
      EXPECT_EQ(overlapped.iterations, after.iterations);
      ASSERT_EQ(overlapped.weights.size(), after.weights.size());
      for (std::size_t i = 0; i < after.weights.size(); ++i)
        EXPECT_EQ(overlapped.weights[i], after.weights[i]) << "variable " << i;
      ASSERT_EQ(overlapped.slots.size(), after.slots.size());
      for (std::size_t i = 0; i < after.slots.size(); ++i) EXPECT_EQ(overlapped.slots[i], after.slots[i]) << "slot " << i;
    }
  }
}

// Accumulated micro-steps are exchanged once, after the last one's backward pass: that one
// cannot start early (the sums held back are added first), and the results do not change.
TEST(OverlappedExchange, GradientAccumulationExchangesOnceAtTheEnd) {
  const auto d = test::random_classification(48, 6, 3, 29);
  std::vector<std::vector<float>> weights[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    MirroredStrategy strategy({.num_cpu_devices = 2, .bucket_cap_bytes = 128, .overlap_gradients = overlap != 0});
    auto scope = strategy.scope();
    set_random_seed(9);
    Sequential model({layers::Dense(8, "relu", 6), layers::Dense(3, "softmax")});
    model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
    FitOptions o;
    o.batch_size = 12;
    o.epochs = 2;
    o.shuffle = false;
    o.verbose = 0;
    o.gradient_accumulation_steps = 2;
    model.fit(d.x, d.y, o);
    EXPECT_EQ(strategy.gradient_reducer(0).buckets_started_early(), 0u);
    for (const auto& v : model.variables()) weights[overlap].push_back(v.value().to_vector<float>());
  }
  EXPECT_EQ(weights[1], weights[0]);
}

// A step whose backward pass fails after the exchange began leaves nothing behind: the next
// step's exchange is its own, and sums what it should.
TEST(OverlappedExchange, AnExchangeLeftUnfinishedByAFailedStepIsDropped) {
  MirroredStrategy strategy({.num_cpu_devices = 2});
  auto scope = strategy.scope();
  Variable v(Tensor::zeros({4}));
  const std::vector<Variable> vars{v};
  EXPECT_THROW(strategy.run_void([&](ReplicaContext& rc) {
    const GradientReadyFn ready = rc.begin_gradient_exchange(vars, nullptr);
    ASSERT_TRUE(ready);
    ready(0, Tensor::full({4}, 100.0f));  // its one bucket starts
    throw ValueError("backward failed");
  }), std::exception);
  const auto sums = strategy.run([&](ReplicaContext& rc) {
    std::vector<Tensor> grads{Tensor::full({4}, static_cast<float>(rc.replica_id_in_sync_group() + 1))};
    EXPECT_TRUE(rc.all_reduce_gradients(grads, vars));
    return grads[0];
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(sums[r].to_vector<float>(), std::vector<float>(4, 3.0f)) << "replica " << r;
}
