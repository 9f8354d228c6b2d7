// ZeRO stage 1 on CPU replicas (MirroredOptions::shard_optimizer_update): each replica updates
// its shard of every variable after the gradients' reduce-scatter and the shards are copied
// into every copy; or, as one process's replicas do by default, reading every replica's
// gradients in place and writing every copy within the update (MirroredOptions::gradients_in_place).
// What a user relies on: the weights and the optimizer's slots come out
// bit-identical to every replica updating everything (so checkpoints, resumes and the
// 1-vs-N equivalences are unchanged), through fit's train step and through apply_gradients in
// a custom loop, for every rule and for shards that split variables unevenly.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/io/checkpoint.hpp"
#include "lockstep/lockstep.hpp"

using namespace lockstep;
using namespace lockstep::distribute;

namespace {

// 12 -> 16 -> 3: 208 + 51 = 259 parameters, a prime, so 2 and 3 replicas split every bucket
// unevenly and shard boundaries fall inside variables.
std::unique_ptr<Sequential> make_model() {
  set_random_seed(5);
  return std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(16, "relu", 12), layers::Dropout(0.2), layers::Dense(3, "softmax")});
}

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> slots;  // every variable's slots, as a checkpoint reads them
  std::int64_t iterations = 0;
};

using MakeOptimizer = optimizers::OptimizerPtr (*)();

Trained collect(Model& model, optimizers::Optimizer& opt) {
  Trained t;
  for (const auto& v : model.variables()) t.weights.push_back(v.value().to_vector<float>());
  for (const auto& v : model.trainable_variables())
    for (const auto& [name, s] : opt.slots(v)) t.slots.push_back(s.to_vector<float>());
  t.iterations = opt.iterations();
  return t;
}

// A strategy of `replicas` CPU replicas; a sharded update reads the gradients in place or
// reduce-scatters them.
std::unique_ptr<MirroredStrategy> cpu_strategy(int replicas, bool shard, bool in_place) {
  return std::make_unique<MirroredStrategy>(
      MirroredOptions{.num_cpu_devices = replicas, .shard_optimizer_update = shard, .gradients_in_place = in_place});
}

// Five global batches of 10 through train_step (fit's step), on `replicas` CPU replicas.
Trained fit_steps(int replicas, bool shard, MakeOptimizer make_optimizer, bool in_place = true) {
  const auto d = test::random_classification(50, 12, 3, 17);
  auto owned = cpu_strategy(replicas, shard, in_place);
  MirroredStrategy& strategy = *owned;
  auto scope = strategy.scope();
  auto model = make_model();
  auto opt = make_optimizer();
  model->compile(opt, losses::SparseCategoricalCrossentropy(), {"accuracy"});
  for (std::int64_t b = 0; b < 50; b += 10) model->train_step(d.x.slice(b, b + 10), d.y.slice(b, b + 10));
  strategy.check_mirrored(model->variables());
  return collect(*model, *opt);
}

// The same through the TF tutorial's loop: apply_gradients inside strategy.run.
Trained custom_loop_steps(int replicas, bool shard, MakeOptimizer make_optimizer, bool in_place = true) {
  const auto d = test::random_classification(50, 12, 3, 17);
  auto owned = cpu_strategy(replicas, shard, in_place);
  MirroredStrategy& strategy = *owned;
  auto ds = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(10));
  auto scope = strategy.scope();
  auto model = make_model();
  auto opt = make_optimizer();
  auto loss = losses::SparseCategoricalCrossentropy();
  auto it = ds.make_iterator();
  while (auto batch = it->next()) {
    strategy.run(
        [&](const data::Element& xy) {
          GradientTape tape;
          const Tensor l = compute_average_loss(loss->per_example(xy[1], (*model)(xy[0], {.training = true})));
          const auto vars = model->trainable_variables();
          opt->apply_gradients(tape.gradient(l, vars), vars);
          return l;
        },
        *batch);
  }
  strategy.check_mirrored(model->variables());
  return collect(*model, *opt);
}

optimizers::OptimizerPtr adam() { return optimizers::Adam(1e-2); }
optimizers::OptimizerPtr adamw_clipvalue() {
  optimizers::AdamWOptions o;
  o.learning_rate = 1e-2;
  o.clipvalue = 0.01;  // elementwise: still sharded
  return optimizers::AdamW(o);
}
optimizers::OptimizerPtr sgd_nesterov() { return optimizers::SGD(0.1, 0.9, true); }
optimizers::OptimizerPtr adam_global_clipnorm() {  // needs every gradient: not sharded
  optimizers::AdamOptions o;
  o.learning_rate = 1e-2;
  o.global_clipnorm = 0.05;
  return optimizers::Adam(o);
}

optimizers::OptimizerPtr rmsprop_centered_momentum() {  // three slots; the gradients summed before its rule
  optimizers::RMSpropOptions o;
  o.learning_rate = 1e-2;
  o.momentum = 0.5;
  o.centered = true;
  return optimizers::RMSprop(o);
}

struct Rule {
  const char* name;
  MakeOptimizer make;
};
const Rule kRules[] = {{"Adam", adam}, {"AdamW+clipvalue", adamw_clipvalue}, {"SGD nesterov", sgd_nesterov},
                       {"Adam+global_clipnorm", adam_global_clipnorm},
                       {"RMSprop centered+momentum", rmsprop_centered_momentum}};

void expect_same(const Trained& got, const Trained& want) {
  EXPECT_EQ(got.iterations, want.iterations);
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (std::size_t i = 0; i < want.weights.size(); ++i) EXPECT_EQ(got.weights[i], want.weights[i]) << "variable " << i;
  ASSERT_EQ(got.slots.size(), want.slots.size());
  for (std::size_t i = 0; i < want.slots.size(); ++i) EXPECT_EQ(got.slots[i], want.slots[i]) << "slot " << i;
}

}  // namespace

TEST(ShardedUpdate, FitStepsGiveTheSameBitsAsUnshardedOn2And3Replicas) {
  for (const Rule& rule : kRules) {
    for (int replicas : {2, 3}) {
      SCOPED_TRACE(std::string(rule.name) + ", replicas = " + std::to_string(replicas));
      const Trained want = fit_steps(replicas, false, rule.make);
      EXPECT_EQ(want.iterations, 5);
      for (bool in_place : {true, false}) {
        SCOPED_TRACE(in_place ? "gradients read in place" : "gradients reduce-scattered");
        expect_same(fit_steps(replicas, true, rule.make, in_place), want);
      }
    }
  }
}

TEST(ShardedUpdate, ApplyGradientsInsideRunGivesTheSameBitsAsUnsharded) {
  for (const Rule& rule : kRules) {
    for (int replicas : {2, 3}) {
      SCOPED_TRACE(std::string(rule.name) + ", replicas = " + std::to_string(replicas));
      const Trained want = custom_loop_steps(replicas, false, rule.make);
      EXPECT_EQ(want.iterations, 5);  // once per step, not per replica
      for (bool in_place : {true, false}) {
        SCOPED_TRACE(in_place ? "gradients read in place" : "gradients reduce-scattered");
        expect_same(custom_loop_steps(replicas, true, rule.make, in_place), want);
      }
    }
  }
}

TEST(ShardedUpdate, TheStrategySaysWhenItShards) {
  const auto d = test::random_classification(8, 12, 3, 1);
  for (bool option : {true, false}) {
    MirroredStrategy strategy({.num_cpu_devices = 2, .shard_optimizer_update = option});
    auto scope = strategy.scope();
    auto model = make_model();
    model->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy());
    model->train_step(d.x, d.y);
    const auto vars = model->trainable_variables();
    const auto answers = strategy.run([&](ReplicaContext& rc) { return rc.shards_update(vars) ? 1 : 0; });
    for (int r = 0; r < 2; ++r) EXPECT_EQ(answers[r], option ? 1 : 0) << "replica " << r;
  }
}

namespace {
// One sharded step through apply_gradients, then one step the pre-TF way (all_reduce_gradients
// and apply_gradients_at on every replica: each updates all of its copy), on 2 replicas.
struct Switched {
  std::string error;  // what the unsharded step said before broadcast_slots
  std::vector<std::vector<float>> weights;
};
Switched shard_then_unsharded(bool shard) {
  const auto d = test::random_classification(20, 12, 3, 23);
  MirroredStrategy strategy({.num_cpu_devices = 2, .shard_optimizer_update = shard});
  auto ds = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(10));
  auto scope = strategy.scope();
  auto model = make_model();
  auto opt = optimizers::Adam(1e-2);
  auto loss = losses::SparseCategoricalCrossentropy();
  auto it = ds.make_iterator();
  const auto grads_of = [&](const data::Element& xy) {
    GradientTape tape;
    const Tensor l = compute_average_loss(loss->per_example(xy[1], (*model)(xy[0], {.training = true})));
    return tape.gradient(l, model->trainable_variables());
  };
  const auto first = it->next();
  strategy.run(
      [&](const data::Element& xy) {
        opt->apply_gradients(grads_of(xy), model->trainable_variables());
        return 0;
      },
      *first);
  const auto second = it->next();
  const auto manual_step = [&] {
    strategy.run(
        [&](const data::Element& xy) {
          auto grads = grads_of(xy);
          const auto vars = model->trainable_variables();
          get_replica_context()->all_reduce_gradients(grads, vars);
          std::vector<std::pair<Tensor, Variable>> gv;
          for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
          opt->apply_gradients_at(gv, opt->iterations());
          return 0;
        },
        *second);
  };
  Switched out;
  // The refused step below still counts as a run (dropout is keyed by the run count), so the
  // unsharded reference makes one empty run in its place.
  if (!shard) strategy.run([](const data::Element&) { return 0; }, *second);
  try {
    manual_step();
  } catch (const std::exception& e) {
    out.error = e.what();
    for (const auto& v : model->trainable_variables()) opt->broadcast_slots(v);
    manual_step();
  }
  strategy.check_mirrored(model->variables());
  for (const auto& v : model->variables()) out.weights.push_back(v.value().to_vector<float>());
  return out;
}
}  // namespace

TEST(ShardedUpdate, AnUnshardedUpdateAfterAShardedOneAsksForBroadcastSlotsThenMatches) {
  const Switched want = shard_then_unsharded(false);
  EXPECT_EQ(want.error, "");
  const Switched got = shard_then_unsharded(true);
  EXPECT_NE(got.error.find("broadcast_slots"), std::string::npos) << got.error;
  EXPECT_NE(got.error.find("sharded"), std::string::npos) << got.error;
  EXPECT_EQ(got.weights, want.weights);
}

// A barrier compares no arguments: replicas that pass apply_gradients different variables must
// still get the error a collective gives (and the strategy go on), not read past a list.
TEST(ShardedUpdate, ReplicasUpdatingDifferentVariablesGetAnErrorAndTheStrategyGoesOn) {
  const auto d = test::random_classification(20, 12, 3, 31);
  for (bool in_place : {true, false}) {
    SCOPED_TRACE(in_place ? "gradients read in place" : "gradients reduce-scattered");
    auto strategy = cpu_strategy(2, true, in_place);
    auto ds = strategy->experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(10));
    auto scope = strategy->scope();
    auto model = make_model();
    auto opt = optimizers::Adam(1e-2);
    auto loss = losses::SparseCategoricalCrossentropy();
    auto it = ds.make_iterator();
    const auto batch = it->next();
    const auto step = [&](bool alike) {
      strategy->run(
          [&](const data::Element& xy) {
            GradientTape tape;
            const Tensor l = compute_average_loss(loss->per_example(xy[1], (*model)(xy[0], {.training = true})));
            auto vars = model->trainable_variables();
            if (!alike && get_replica_context()->replica_id_in_sync_group() == 1) vars.pop_back();
            opt->apply_gradients(tape.gradient(l, vars), vars);
            return 0;
          },
          *batch);
    };
    try {
      step(false);
      ADD_FAILURE() << "replicas updating different variables trained";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
    }
    EXPECT_EQ(opt->iterations(), 0);
    step(true);
    EXPECT_EQ(opt->iterations(), 1);
    strategy->check_mirrored(model->variables());
  }
}

// The sharded update asks the optimizer only for its elementwise rule: none where one element's
// update needs more than that element (a norm over a variable or all of them, loss scaling's
// check of every gradient), and then every replica updates all of its copies.
TEST(ShardedUpdate, OnlyAnElementwiseRuleIsHandedOver) {
  EXPECT_NE(adam()->elementwise_rule(), nullptr);
  EXPECT_NE(adamw_clipvalue()->elementwise_rule(), nullptr);
  EXPECT_NE(sgd_nesterov()->elementwise_rule(), nullptr);
  EXPECT_EQ(adam_global_clipnorm()->elementwise_rule(), nullptr);
  optimizers::SGDOptions clipnorm;
  clipnorm.clipnorm = 1.0;
  EXPECT_EQ(optimizers::SGD(clipnorm)->elementwise_rule(), nullptr);
  EXPECT_EQ(optimizers::LossScale(adam())->elementwise_rule(), nullptr);
}

// On one worker every copy of a sharded variable uses copy 0's slots (so a checkpoint read from
// any copy finds them whole), and nothing is held in shards.
TEST(ShardedUpdate, OnOneWorkerTheCopiesShareWholeSlots) {
  const auto d = test::random_classification(20, 12, 3, 37);
  MirroredStrategy strategy({.num_cpu_devices = 2});
  auto scope = strategy.scope();
  auto model = make_model();
  auto opt = adam();
  model->compile(opt, losses::SparseCategoricalCrossentropy());
  model->train_step(d.x, d.y);
  EXPECT_FALSE(strategy.sharded_update().slots_partial());
  const auto vars = model->trainable_variables();
  const auto seen = strategy.run([&](ReplicaContext&) {
    std::vector<std::vector<float>> s;
    for (const auto& v : vars)
      for (const auto& [name, t] : io::slots_to_save(*opt, v))
        s.push_back(t.to_vector<float>());
    return s;
  });
  EXPECT_EQ(seen[1], seen[0]);
  EXPECT_NE(seen[0][0], std::vector<float>(seen[0][0].size(), 0.0f));  // updated, not fresh zeros
}
