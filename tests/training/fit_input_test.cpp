// fit where training keeps every core busy: each replica gathers its own slice of a batch of
// rows (data::RowBatch) instead of a pipeline thread gathering the whole batch. It must train
// exactly as the gathered batches do.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>

#include "backend/context.hpp"
#include "common/random_data.hpp"
#include "lockstep/data/thread_budget.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"

namespace lockstep {
namespace {

using distribute::MirroredStrategy;

using Data = test::Classification;
Data make_data(std::int64_t n) { return test::random_classification(n, 12, 4, 11); }

struct Result {
  std::vector<std::vector<float>> weights;
  std::map<std::string, std::vector<double>> history;
};

// Trains a fresh model under `replicas` devices on `make_ds()`, or on it behind an identity
// map (which has no row batches, so fit reads gathered elements).
Result train(int replicas, bool through_map, const std::function<data::Dataset()>& make_ds, const FitOptions& o) {
  MirroredStrategy strategy({.num_cpu_devices = replicas});
  std::unique_ptr<Sequential> model;
  {
    auto scope = strategy.scope();
    set_random_seed(4);
    model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Dense(8, "relu", 12), layers::Dropout(0.3), layers::Dense(4, "softmax")});
    model->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  }
  data::Dataset ds = make_ds();
  if (through_map) ds = ds.map([](data::Element e) { return e; });
  const History h = model->fit(ds, o);
  strategy.check_mirrored(model->variables());
  Result r{{}, h.history};
  for (const auto& v : model->variables()) r.weights.push_back(v.value().to_vector<float>());
  return r;
}

TEST(FitInput, ReplicasGatheringTheirSlicesTrainAsGatheredBatches) {
  // Whatever the machine, training holds every core: fit takes the row batches.
  auto& budget = data::ThreadBudget::process();
  const auto hold = budget.reserve_compute(budget.cores());
  const Data d = make_data(41);
  // 41 examples in batches of 8: the last batch has one row, so some replicas get none.
  const auto finite = [&] { return data::Dataset::from_tensor_slices(d.x, d.y).shuffle(41, 2).batch(8); };
  const auto endless = [&] {
    return data::Dataset::from_tensor_slices(d.x, d.y).shuffle(41, 2).batch(6).prefetch(data::kAutotune).repeat();
  };
  for (int replicas : {1, 2, 3}) {
    const FitOptions per_pass{.epochs = 2, .verbose = 0};
    const Result a = train(replicas, false, finite, per_pass);
    const Result b = train(replicas, true, finite, per_pass);
    EXPECT_EQ(a.weights, b.weights) << replicas << " replicas, one pass per epoch";
    EXPECT_EQ(a.history.at("loss"), b.history.at("loss")) << replicas << " replicas";
    EXPECT_EQ(a.history.at("accuracy"), b.history.at("accuracy")) << replicas << " replicas";

    FitOptions steps{.epochs = 2, .verbose = 0, .gradient_accumulation_steps = 2};
    steps.steps_per_epoch = 9;  // across passes of 7 batches, accumulating pairs
    const Result c = train(replicas, false, endless, steps);
    const Result e = train(replicas, true, endless, steps);
    EXPECT_EQ(c.weights, e.weights) << replicas << " replicas, steps_per_epoch over a repeated pipeline";
    EXPECT_EQ(c.history.at("loss"), e.history.at("loss")) << replicas << " replicas";
  }
}

// The replicas' pools gather the next batch ahead while they train on this one (fit's look-ahead
// by one batch); it must train exactly as gathering each slice when its step starts, whatever
// ends an epoch: the end of a pass, steps_per_epoch over a repeated pipeline, accumulation
// groups, or a callback that stops training with the next batch already read ahead. Without a
// strategy the pool's workers gather (3 threads); with 2 and 3 replicas each replica's own thread
// also gathers while it waits for its peers, on pools of any size (one thread each here).
TEST(FitInput, GatheringTheNextBatchAheadTrainsAsGatheringItInline) {
  auto& budget = data::ThreadBudget::process();
  const auto hold = budget.reserve_compute(budget.cores());
  // Rows of 1.2 KB: a slice of a batch is several chunks of a gather ahead.
  const Data d = test::random_classification(150, 300, 4, 5);
  struct Case {
    const char* what;
    std::function<data::Dataset()> make;
    FitOptions options;
    bool stop_early;
  };
  const auto finite = [&] { return data::Dataset::from_tensor_slices(d.x, d.y).shuffle(150, 3).batch(32); };
  const auto endless = [&] {
    return data::Dataset::from_tensor_slices(d.x, d.y).shuffle(150, 3).batch(24).prefetch(data::kAutotune).repeat();
  };
  FitOptions steps{.epochs = 3, .verbose = 0, .gradient_accumulation_steps = 2};
  steps.steps_per_epoch = 5;
  const Case cases[] = {{"one pass per epoch", finite, {.epochs = 2, .verbose = 0}, false},
                        {"steps_per_epoch over a repeated pipeline, pairs accumulated", endless, steps, false},
                        {"stopped by a callback, then fit again", endless, {.epochs = 2, .verbose = 0}, true}};
  for (int replicas : {0, 2, 3}) {
    // No strategy: fit computes on the current context, a pool of 3 threads on any machine.
    backend::ComputeContext ctx(Device{}, 3);
    const backend::ContextGuard guard(ctx);
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.what) + (replicas ? ", " + std::to_string(replicas) + " replicas" : ", no strategy"));
      Result r[2];
      for (int ahead : {0, 1}) {
        ::setenv("LOCKSTEP_GATHER_AHEAD", ahead ? "1" : "0", 1);
        std::unique_ptr<distribute::MirroredStrategy> strategy;
        if (replicas) strategy = std::make_unique<distribute::MirroredStrategy>(
                          distribute::MirroredOptions{.num_cpu_devices = replicas});
        std::optional<distribute::StrategyScope> scope;
        if (strategy) scope.emplace(*strategy);
        set_random_seed(4);
        Sequential model(std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 300), layers::Dropout(0.3),
                                                       layers::Dense(4, "softmax")});
        model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
        const data::Dataset ds = c.make();
        FitOptions o = c.options;
        if (c.stop_early) {
          o.steps_per_epoch = 6;
          o.callbacks.push_back(std::make_shared<LambdaCallback>(LambdaCallbackOptions{
              .on_train_batch_end = [&](std::int64_t b, const Logs&) { model.stop_training = b == 2; }}));
        }
        History h = model.fit(ds, o);
        if (c.stop_early) {
          o.callbacks.clear();
          const History more = model.fit(ds, o);
          h.history["loss"].insert(h.history["loss"].end(), more.history.at("loss").begin(),
                                   more.history.at("loss").end());
        }
        if (strategy) strategy->check_mirrored(model.variables());
        for (const auto& v : model.variables()) r[ahead].weights.push_back(v.value().to_vector<float>());
        r[ahead].history = h.history;
      }
      ::unsetenv("LOCKSTEP_GATHER_AHEAD");
      EXPECT_EQ(r[1].weights, r[0].weights);
      EXPECT_EQ(r[1].history.at("loss"), r[0].history.at("loss"));
    }
  }
}

}  // namespace
}  // namespace lockstep
