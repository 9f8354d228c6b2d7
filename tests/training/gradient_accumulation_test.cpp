// Gradient accumulation: k batches of B, accumulated, train as one batch of k x B would, with
// and without replicas, short last groups included; a custom loop gets the same from no_sync().
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lockstep/autograd/gradient_tape.hpp"
#include "common/mirrored_model.hpp"
#include "common/random_data.hpp"
#include "common/relative_error.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {

using distribute::MirroredStrategy;
using distribute::ReplicaContext;
using test::max_rel_diff;

using Data = test::Classification;
Data make_data(std::int64_t n) { return test::random_classification(n, 20, 5, 7); }

std::unique_ptr<Sequential> make_model() {
  set_random_seed(3);
  // Dropout too: its masks are keyed by the example's row in the whole group, so they match.
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(16, "relu", 20), layers::Dropout(0.25), layers::Dense(5, "softmax")});
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}

std::vector<std::vector<float>> values(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> w;
  for (const auto& v : vars) w.push_back(v.value().to_vector<float>());
  return w;
}


// fit for 2 epochs on batches of `batch`, accumulating k of them; replicas 0: no strategy.
std::vector<std::vector<float>> fit_weights(int replicas, std::int64_t batch, int k, std::int64_t* updates = nullptr) {
  const Data d = make_data(26);
  const auto on = test::model_on_cpus(replicas, make_model);
  const auto ds = data::Dataset::from_tensor_slices(d.x, d.y).batch(batch);
  on.model->fit(ds, {.epochs = 2, .verbose = 0, .gradient_accumulation_steps = k});
  if (on.strategy) on.strategy->check_mirrored(on.model->variables());
  if (updates) *updates = on.model->optimizer()->iterations();
  return test::weights_of(*on.model);
}

TEST(GradientAccumulation, KBatchesTrainAsOneBatchKTimesLarger) {
  // 26 examples: batches 4,4,4 | 4,4,4 | 2 against 12, 12, 2 — a short last group whose one
  // batch is short too; with 3 replicas the batch of 2 leaves one replica without rows.
  for (int replicas : {0, 1, 3}) {
    std::int64_t updates = 0;
    const auto accumulated = fit_weights(replicas, 4, 3, &updates);
    const auto large = fit_weights(replicas, 12, 1);
    EXPECT_EQ(updates, 6) << "3 updates per epoch";
    EXPECT_LE(max_rel_diff(accumulated, large), 1e-5) << replicas << " replicas";
  }
}

TEST(GradientAccumulation, AGroupNeverSpansAnEpochAndCallbacksCountBatches) {
  // 7 batches per epoch, k = 4: groups of 4 and 3 per epoch = one batch of 16 and one of 10.
  const Data d = make_data(26);
  auto model = make_model();
  std::int64_t batch_ends = 0;
  auto counter = std::make_shared<LambdaCallback>(
      LambdaCallbackOptions{.on_train_batch_end = [&](std::int64_t, const Logs&) { ++batch_ends; }});
  model->fit(data::Dataset::from_tensor_slices(d.x, d.y).batch(4),
             {.epochs = 2, .verbose = 0, .callbacks = {counter}, .gradient_accumulation_steps = 4});
  EXPECT_EQ(batch_ends, 14);
  EXPECT_EQ(model->optimizer()->iterations(), 4);
  EXPECT_LE(max_rel_diff(values(model->variables()), fit_weights(0, 16, 1)), 1e-5);
}

TEST(GradientAccumulation, StepsBelowOneAreRefused) {
  auto model = make_model();
  const Data d = make_data(8);
  EXPECT_THROW(model->fit(d.x, d.y, {.verbose = 0, .gradient_accumulation_steps = 0}), ValueError);
}

// A custom loop: micro-batches inside ReplicaContext::no_sync() are summed locally; the group's
// last all_reduce_gradients() all-reduces the sums — the gradient of the whole group's batch.
TEST(GradientAccumulation, NoSyncInACustomLoopGivesTheGroupsGradient) {
  MirroredStrategy strategy({.num_cpu_devices = 3});
  auto scope = strategy.scope();
  auto model = make_model();
  model->build(Shape{-1, 20});
  const auto vars = model->trainable_variables();
  const Data d = make_data(16);
  const std::vector<std::int64_t> sizes{6, 6, 4};
  using Result = std::pair<bool, std::vector<Tensor>>;
  auto step = [&](const Tensor& x, const Tensor& y, std::int64_t total, bool hold_back) {
    const auto slices = data::split_batch_for_replicas({x, y}, 3);
    return strategy.run([&](ReplicaContext& rc) -> Result {
      auto quiet = rc.no_sync(hold_back);
      const auto& s = slices[static_cast<std::size_t>(rc.replica_id_in_sync_group())];
      GradientTape tape;
      const auto out = model->forward(s[0], layers::CallContext{.replica = &rc});
      const Tensor loss =
          distribute::compute_average_loss(model->loss()->per_example(s[1], out.output, out.logits), total);
      auto grads = tape.gradient(loss, vars);
      const bool reduced = rc.all_reduce_gradients(grads, vars);
      std::vector<Tensor> copies;
      for (const auto& g : grads) copies.push_back(g.clone());
      return {reduced, copies};
    });
  };
  const auto whole = step(d.x, d.y, 16, false);
  std::int64_t start = 0;
  for (std::size_t j = 0; j < sizes.size(); ++j) {
    const bool last = j + 1 == sizes.size();
    const auto part = step(d.x.slice(start, start + sizes[j]), d.y.slice(start, start + sizes[j]), 16, !last);
    start += sizes[j];
    for (int r = 0; r < 3; ++r) {
      const auto& [reduced, grads] = part[static_cast<std::size_t>(r)];
      EXPECT_EQ(reduced, last) << "micro-step " << j << ", replica " << r;
      if (!last) continue;
      std::vector<std::vector<float>> got, want;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        got.push_back(grads[i].to_vector<float>());
        want.push_back(whole[static_cast<std::size_t>(r)].second[i].to_vector<float>());
      }
      EXPECT_LE(max_rel_diff(got, want), 1e-5) << "replica " << r;
    }
  }
}

// What the accumulator holds, as each host call leaves it: add() holds the variables that got a
// gradient, take() and clear() drop them, and note_step, after a step a replay may have run
// (none of this host code), leaves a held-back batch's variables held as the last add() did, an
// applied batch's not. empty() says whether anything is held.
TEST(GradientAccumulation, TheAccumulatorHoldsWhatAddTakeClearAndNoteStepLeave) {
  const Variable a(Tensor::from_vector(std::vector<float>{1, 2}, {2}), "a");
  const Variable b(Tensor::from_vector(std::vector<float>{3}, {1}), "b");
  const std::vector<Variable> vars{a, b};
  const Tensor ga = Tensor::from_vector(std::vector<float>{0.5f, -1}, {2});
  const auto held = [&](distribute::GradientAccumulator& acc) {  // which are held, by what take() gives
    const std::vector<Tensor> sums = acc.take({Tensor(), Tensor()}, vars);
    return std::pair{sums[0].defined(), sums[1].defined()};
  };
  distribute::GradientAccumulator acc;
  EXPECT_TRUE(acc.empty());
  acc.add({ga, Tensor()}, vars);  // b got no gradient: not held
  EXPECT_FALSE(acc.empty());
  acc.add({ga, Tensor()}, vars);
  const std::vector<Tensor> sums = acc.take({ga, Tensor()}, vars);
  EXPECT_EQ(sums[0].to_vector<float>(), (std::vector<float>{1.5f, -3}));
  EXPECT_FALSE(sums[1].defined());
  EXPECT_TRUE(acc.empty());
  // A replayed held-back batch: held as the last add() left it (a only).
  acc.note_step(vars, true);
  EXPECT_FALSE(acc.empty());
  EXPECT_EQ(held(acc), std::pair(true, false));
  EXPECT_TRUE(acc.empty());
  acc.note_step(vars, true);
  acc.note_step(vars, false);  // a replayed applied batch: nothing held
  EXPECT_TRUE(acc.empty());
  acc.note_step(vars, true);
  acc.clear();
  EXPECT_TRUE(acc.empty());
  acc.note_step(vars, true);  // after clear(), a replay holds what the last add() held
  EXPECT_EQ(held(acc), std::pair(true, false));
  // An eager held-back batch: note_step leaves what add() did.
  acc.add({Tensor(), Tensor::from_vector(std::vector<float>{2}, {1})}, vars);
  acc.note_step(vars, true);
  EXPECT_EQ(held(acc), std::pair(false, true));
}

}  // namespace
}  // namespace lockstep
