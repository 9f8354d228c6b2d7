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

// `lockstep train`'s pipeline: uint8 pixels cast to floats by the pipeline as each replica
// gathers its slice (Dataset::cast_and_scale; on one-core replicas the bytes are gathered ahead
// and cast when the step takes them). Training must be exactly training on pixels scaled
// beforehand, on 1 to 3 replicas, with the row batches and without (behind a map).
TEST(FitInput, PixelsCastByThePipelineTrainAsPixelsScaledBeforehand) {
  auto& budget = data::ThreadBudget::process();
  const auto hold = budget.reserve_compute(budget.cores());
  constexpr std::int64_t kN = 41;
  std::mt19937 rng(5);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kN * 12));
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng() % 256);
  const Tensor bytes = Tensor::from_vector(pixels, Shape{kN, 12});
  const Tensor floats = flatten_and_scale_images(bytes);
  const Tensor labels = make_data(kN).y;
  const auto scaled_before = [&] { return data::Dataset::from_tensor_slices(floats, labels).shuffle(kN, 2).batch(8); };
  const auto cast_by_pipeline = [&] {
    return data::Dataset::from_tensor_slices(bytes, labels).cast_and_scale(kPixelScale).shuffle(kN, 2).batch(8);
  };
  ASSERT_NE(cast_by_pipeline().make_row_batch_iterator(), nullptr);
  for (int replicas : {1, 2, 3}) {
    const FitOptions o{.epochs = 2, .verbose = 0};
    const Result want = train(replicas, false, scaled_before, o);
    for (bool through_map : {false, true}) {
      const Result got = train(replicas, through_map, cast_by_pipeline, o);
      EXPECT_EQ(got.weights, want.weights) << replicas << " replicas" << (through_map ? ", behind a map" : "");
      EXPECT_EQ(got.history.at("loss"), want.history.at("loss")) << replicas << " replicas";
    }
  }
}

// A model that starts with Rescaling(1 / 255) (a Keras file's, which `lockstep train` then gives
// its images as bytes, flatten_images_for) must train exactly as the same model without
// Rescaling on pixels scaled beforehand (flatten_and_scale_images), on 1 to 3 replicas.
TEST(FitInput, PixelsRescaledByTheModelTrainAsPixelsScaledBeforehand) {
  auto& budget = data::ThreadBudget::process();
  const auto hold = budget.reserve_compute(budget.cores());
  constexpr std::int64_t kN = 45, kPixels = 30;
  std::mt19937 rng(9);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kN * kPixels));
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng() % 256);
  const Tensor images = Tensor::from_vector(pixels, Shape{kN, 5, 6});
  const Tensor labels = make_data(kN).y;
  const Tensor raw = flatten_images_for(images, true);
  ASSERT_EQ(raw.dtype(), DType::kU8);
  ASSERT_EQ(raw.shape(), (Shape{kN, kPixels}));
  const Tensor scaled = flatten_images_for(images, false);
  ASSERT_EQ(scaled.dtype(), DType::kF32);

  for (int replicas : {1, 2, 3}) {
    MirroredStrategy strategy({.num_cpu_devices = replicas});
    std::vector<std::unique_ptr<Sequential>> models;
    for (bool rescale : {true, false}) {
      auto scope = strategy.scope();
      auto model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{layers::Input(Shape{kPixels})});
      if (rescale) model->add(layers::Rescaling(1.0f / 255.0f));
      model->add(layers::Dense(8, "relu"));
      model->add(layers::Dense(4, "softmax"));
      models.push_back(std::move(model));
      models.back()->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    }
    ASSERT_TRUE(rescales_its_input(*models[0]));
    ASSERT_FALSE(rescales_its_input(*models[1]));
    // The same starting weights (Rescaling moves the Dense layers' seeds).
    const auto from = models[0]->variables(), to = models[1]->variables();
    ASSERT_EQ(from.size(), to.size());
    for (std::size_t i = 0; i < from.size(); ++i) to[i].assign(from[i].value());
    std::vector<std::map<std::string, std::vector<double>>> histories;
    for (int m = 0; m < 2; ++m) {
      const Tensor& x = m == 0 ? raw : scaled;
      histories.push_back(
          models[static_cast<std::size_t>(m)]
              ->fit(data::Dataset::from_tensor_slices(x, labels).shuffle(kN, 3).batch(8), {.epochs = 2, .verbose = 0})
              .history);
    }
    for (std::size_t i = 0; i < from.size(); ++i)
      EXPECT_EQ(from[i].value().to_vector<float>(), to[i].value().to_vector<float>())
          << replicas << " replicas, " << from[i].name();
    EXPECT_EQ(histories[0].at("loss"), histories[1].at("loss")) << replicas << " replicas";
    // And the trained model predicts from the bytes what the other predicts from the floats.
    EXPECT_EQ(models[0]->predict(raw).to_vector<float>(), models[1]->predict(scaled).to_vector<float>());
  }
}

// image_slices, the CLI's one input path for the training and the test set (train's validation
// and evaluate, `lockstep evaluate`): uint8 pixels stay bytes in memory, cast and scaled a batch at
// a time for a model that does not scale its own input, and evaluate gives exactly what it gives
// on pixels scaled beforehand; for a model that does, the bytes go to it as they are.
TEST(FitInput, ImageSlicesEvaluateAsPixelsScaledBeforehand) {
  constexpr std::int64_t kN = 37;
  std::mt19937 rng(13);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(kN * 12));
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng() % 256);
  const Tensor bytes = Tensor::from_vector(pixels, Shape{kN, 12});
  const Tensor labels = make_data(kN).y;
  EXPECT_EQ(image_slices(bytes, labels, true).make_iterator()->next()->at(0).dtype(), DType::kU8);
  const Tensor floats = flatten_and_scale_images(bytes);
  EXPECT_EQ(image_slices(floats, labels, false).make_iterator()->next()->at(0).dtype(), DType::kF32);
  for (int replicas : {1, 2}) {
    MirroredStrategy strategy({.num_cpu_devices = replicas});
    auto scope = strategy.scope();
    Sequential model(std::vector<layers::LayerPtr>{layers::Input(Shape{12}), layers::Dense(6, "relu"),
                                                   layers::Dense(4, "softmax")});
    model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    const Logs want = model.evaluate(floats, labels, {.batch_size = 8});
    const Logs got = model.evaluate(image_slices(bytes, labels, false).batch(8));
    EXPECT_EQ(got, want) << replicas << " replicas";
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
        o.gather_ahead = ahead != 0;
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
      EXPECT_EQ(r[1].weights, r[0].weights);
      EXPECT_EQ(r[1].history.at("loss"), r[0].history.at("loss"));
    }
  }
}

// MirroredOptions::check_mirrored (debug): after every training step, fit's or train_step's,
// the replicas' copies of every variable are checked bit for bit. 3 replicas and batches of 32
// (split unevenly) pass it; a copy made to differ is named at the next step, and only when asked
// (the update not sharded: a sharded one writes every copy of each shard, mending the drift).
TEST(FitInput, CheckMirroredOptionChecksEveryStep) {
  const Data d = test::random_classification(96, 6, 3, 7);
  for (bool check : {false, true}) {
    SCOPED_TRACE(check ? "check_mirrored" : "not checked");
    MirroredStrategy strategy(
        {.num_cpu_devices = 3, .pin_threads = false, .shard_optimizer_update = false, .check_mirrored = check});
    auto scope = strategy.scope();
    set_random_seed(4);
    Sequential model(std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 6), layers::Dropout(0.3),
                                                   layers::Dense(3, "softmax")});
    model.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
    EXPECT_NO_THROW(model.fit(d.x, d.y, {.epochs = 2, .batch_size = 32, .verbose = 0}));
    const Variable kernel = model.trainable_variables()[0];
    strategy.run_void([&](distribute::ReplicaContext& ctx) {
      if (ctx.replica_id_in_sync_group() == 1) kernel.assign_add(Tensor::ones(kernel.value().shape()));
    });
    ASSERT_THROW(strategy.check_mirrored(model.variables()), DistributedError);
    if (!check) {
      EXPECT_NO_THROW(model.train_step(d.x.slice(0, 32), d.y.slice(0, 32)));
      continue;
    }
    try {
      model.train_step(d.x.slice(0, 32), d.y.slice(0, 32));
      ADD_FAILURE() << "no error";
    } catch (const DistributedError& e) {
      EXPECT_NE(std::string(e.what()).find("drifted: replica 1's copy differs"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lockstep
