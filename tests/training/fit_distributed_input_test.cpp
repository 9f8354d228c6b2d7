// The one distributed input path (Strategy::DistributedIterator) that fit and custom loops
// read: batches of rows that each replica gathers itself, and the next batch read ahead for the
// replicas to gather during the step. A custom loop reading this way must train exactly as one
// reading whole batches one at a time.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/data/thread_budget.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep {
namespace {

using distribute::DistributedInputOptions;
using distribute::MirroredStrategy;
using Dist = distribute::Strategy::DistributedDataset;

// TF's tutorial loop (strategy.run, GradientTape, apply_gradients) for two passes over `dist`;
// returns the weights.
std::vector<std::vector<float>> custom_loop(MirroredStrategy& strategy, Sequential& model, const Dist& dist) {
  const auto loss_object = losses::SparseCategoricalCrossentropy();
  const auto optimizer = optimizers::Adam(1e-2);
  const auto step = [&](const data::Element& inputs) {
    GradientTape tape;
    const Tensor predictions = model(inputs[0], {.training = true});
    const Tensor loss = distribute::compute_average_loss(loss_object->per_example(inputs[1], predictions));
    const auto vars = model.trainable_variables();
    optimizer->apply_gradients(tape.gradient(loss, vars), vars);
    return loss;
  };
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto it = dist.make_iterator();
    while (auto batch = it->next()) (void)strategy.run(step, *batch);
  }
  strategy.check_mirrored(model.variables());
  std::vector<std::vector<float>> out;
  for (const auto& v : model.variables()) out.push_back(v.value().to_vector<float>());
  return out;
}

TEST(DistributedInput, ACustomLoopGatheringAheadTrainsAsOneReadingWholeBatches) {
  auto& budget = data::ThreadBudget::process();
  const auto hold = budget.reserve_compute(budget.cores());
  // Rows of 1.2 KB: a slice of a batch is several chunks of a gather ahead; 150 rows in batches
  // of 32 end with a short one.
  const test::Classification d = test::random_classification(150, 300, 4, 5);
  // A fresh pipeline per run: a shuffle's order depends on how many passes came before.
  const auto make_ds = [&] { return data::Dataset::from_tensor_slices(d.x, d.y).shuffle(150, 3).batch(32); };
  for (int replicas : {2, 3}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    std::vector<std::vector<float>> weights[2];
    for (int ahead : {0, 1}) {
      MirroredStrategy strategy({.num_cpu_devices = replicas});
      auto scope = strategy.scope();
      set_random_seed(4);
      Sequential model(std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 300), layers::Dropout(0.3),
                                                     layers::Dense(4, "softmax")});
      const Dist dist(make_ds(), DistributedInputOptions{.replicas = replicas,
                                                  .row_batches = ahead == 1,
                                                  .read_ahead = ahead == 1});
      weights[ahead] = custom_loop(strategy, model, dist);
    }
    EXPECT_EQ(weights[1], weights[0]);
  }
}

TEST(DistributedInput, TheIteratorReadsTheNextBatchAheadAndCutsTheSlicesOfTheWholeBatch) {
  std::vector<float> xs(7);
  for (int i = 0; i < 7; ++i) xs[static_cast<std::size_t>(i)] = static_cast<float>(i);
  const data::Dataset ds = data::Dataset::from_tensor_slices(Tensor::from_vector(xs, {7})).batch(3);
  // Replicas 1 and 2 of 3 (a second worker's, say): rows split as split_batch_for_replicas does.
  const Dist dist(ds, DistributedInputOptions{.replicas = 3, .first_replica = 1, .local_replicas = 2,
                                              .row_batches = true});
  auto it = dist.make_iterator();
  auto b1 = it->next();
  ASSERT_TRUE(b1);
  ASSERT_TRUE(b1->ahead) << "a batch of rows reads the next one ahead";
  EXPECT_EQ(b1->global_size, 3);
  EXPECT_EQ(b1->offsets, (std::vector<std::int64_t>{1, 2}));
  ASSERT_EQ(b1->slices.size(), 2u);
  EXPECT_EQ(b1->slices[0][0].to_vector<float>(), (std::vector<float>{1}));
  EXPECT_EQ(b1->slices[1][0].to_vector<float>(), (std::vector<float>{2}));
  auto b2 = it->next(/*read_ahead=*/false);
  ASSERT_TRUE(b2);
  EXPECT_EQ(b2->global, b1->ahead) << "the batch read ahead is the next one returned";
  EXPECT_FALSE(b2->ahead);
  auto b3 = it->next();  // the short last batch: 1 row over 3 replicas
  ASSERT_TRUE(b3);
  EXPECT_FALSE(b3->ahead) << "nothing after the last batch";
  EXPECT_EQ(b3->slices[0][0].numel(), 0);
  EXPECT_EQ(b3->slices[1][0].numel(), 0);
  EXPECT_FALSE(it->next());
  auto again = dist.make_iterator();
  again->skip(2);
  auto last = again->next();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->global_size, 1);
  EXPECT_THROW((void)b1->slices[2], ValueError);
}

}  // namespace
}  // namespace lockstep
