#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/io/event_file_reader.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/checkpointing.hpp"
#include "lockstep/training/filepath_format.hpp"

using namespace lockstep;

namespace {
std::string fresh_dir(const std::string& name) {
  const auto d = std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "callbacks" / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}
struct Data {
  Tensor x, y;
  Data() {
    std::vector<float> xv(200 * 4);
    std::vector<std::int64_t> yv(200);
    for (std::size_t i = 0; i < yv.size(); ++i) {
      yv[i] = static_cast<std::int64_t>(i % 2);
      for (std::size_t j = 0; j < 4; ++j) xv[i * 4 + j] = static_cast<float>(((i * 7 + j * 13) % 17)) / 17.0f + (yv[i] ? 0.5f : 0.0f);
    }
    x = Tensor::from_vector(xv, {200, 4});
    y = Tensor::from_vector(yv, {200});
  }
};
std::unique_ptr<Sequential> make_model() {
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 4), layers::Dense(2, "softmax")});
  m->compile(optimizers::Adam(0.01), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  return m;
}
}  // namespace

TEST(FilepathFormat, PythonFormatMiniLanguage) {
  const Logs logs{{"val_loss", 0.123456}, {"accuracy", 0.5}};
  EXPECT_EQ(format_filepath("ckpt-{epoch:02d}-{val_loss:.2f}", {{"epoch", 3}}, logs), "ckpt-03-0.12");
  EXPECT_EQ(format_filepath("{epoch}_{accuracy}_{{x}}", {{"epoch", 12}}, logs), "12_0.5_{x}");
  EXPECT_EQ(format_filepath("{val_loss:.3e}|{accuracy:>6.1%}|{epoch:+d}|{epoch:<4d}|", {{"epoch", 7}}, logs),
            "1.235e-01| 50.0%|+7|7   |");
  try {
    format_filepath("ckpt-{val_acc:.2f}", {{"epoch", 1}}, logs);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'val_acc'"), std::string::npos) << m;
    EXPECT_NE(m.find("val_loss"), std::string::npos) << m;
    EXPECT_NE(m.find("accuracy"), std::string::npos) << m;
  }
}

TEST(ModelCheckpoint, NamesFilesAndSaveBestOnlyKeepsImprovements) {
  const std::string dir = fresh_dir("mc");
  Data d;
  auto model = make_model();
  // Monitor "loss" on a mode that makes improvement impossible after the first epoch.
  auto all = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.filepath = dir + "/all-{epoch:02d}-{loss:.2f}"});
  auto best = std::make_shared<ModelCheckpoint>(
      ModelCheckpointOptions{.filepath = dir + "/best-{epoch:02d}", .monitor = "loss", .save_best_only = true, .mode = "max"});
  model->fit(d.x, d.y, {.epochs = 3, .batch_size = 50, .verbose = 0, .callbacks = {all, best}});
  ASSERT_EQ(all->saved().size(), 3u);
  EXPECT_EQ(std::filesystem::path(all->saved()[1]).filename().string().substr(0, 7), "all-02-");
  for (const auto& p : all->saved()) EXPECT_TRUE(std::filesystem::exists(p + ".safetensors")) << p;
  ASSERT_EQ(best->saved().size(), 1u) << "loss decreases, so mode=max improves only at the first epoch";
  EXPECT_EQ(best->saved()[0], dir + "/best-01");
  // The saved checkpoint loads back into a fresh model of the same architecture.
  auto other = make_model();
  EXPECT_EQ(load_checkpoint(all->saved()[2], *other).epoch, 3);
  EXPECT_EQ(other->variables()[0].value().to_vector<float>(), model->variables()[0].value().to_vector<float>());

  auto bad = std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{.filepath = dir + "/x-{val_acc}"});
  EXPECT_THROW(model->fit(d.x, d.y, {.epochs = 1, .batch_size = 50, .verbose = 0, .callbacks = {bad}}), ValueError);
}

TEST(EarlyStopping, PatienceStopsAndRestoresBestWeights) {
  Data d;
  auto model = make_model();
  std::vector<std::vector<float>> weights_at_end;
  // A fake metric that improves for 2 epochs and then worsens: best epoch is 1.
  int calls = 0;
  auto fake = std::make_shared<LambdaCallback>(LambdaCallbackOptions{.on_epoch_end = [&](int, const Logs&) {
    weights_at_end.push_back(model->variables()[0].value().to_vector<float>());
  }});
  class FakeMetric final : public Callback {
   public:
    explicit FakeMetric(CallbackPtr inner, int* calls) : inner_(std::move(inner)), calls_(calls) {}
    void set_model(Model* m) override { Callback::set_model(m); inner_->set_model(m); }
    void on_train_begin(const Logs& l) override { inner_->on_train_begin(l); }
    void on_epoch_end(int e, const Logs&) override {
      static const double kSeq[] = {1.0, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1};
      inner_->on_epoch_end(e, {{"val_loss", kSeq[(*calls_)++]}});
    }
    CallbackPtr inner_;
    int* calls_;
  };
  auto es = std::make_shared<EarlyStopping>(EarlyStoppingOptions{.patience = 2, .restore_best_weights = true});
  auto h = model->fit(d.x, d.y, {.epochs = 7, .batch_size = 50, .verbose = 0,
                                 .callbacks = {fake, std::make_shared<FakeMetric>(es, &calls)}});
  EXPECT_EQ(h.epoch.size(), 4u) << "best at epoch 1, two epochs without improvement: stop after epoch 3";
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(es->best_epoch(), 1);
  EXPECT_EQ(model->variables()[0].value().to_vector<float>(), weights_at_end[1]);
}

TEST(CSVLogger, WritesHeaderAndOneRowPerEpoch) {
  const std::string dir = fresh_dir("csv");
  Data d;
  auto model = make_model();
  auto h = model->fit(d.x, d.y, {.epochs = 2, .batch_size = 50, .validation_split = 0.25, .verbose = 0,
                                 .callbacks = {std::make_shared<CSVLogger>(dir + "/log.csv", ';')}});
  std::ifstream in(dir + "/log.csv");
  std::string header, r0, r1, extra;
  std::getline(in, header);
  std::getline(in, r0);
  std::getline(in, r1);
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_EQ(header, "epoch;accuracy;input_wait_share;loss;peak_memory_mib;steps_per_second;val_accuracy;val_loss");
  EXPECT_EQ(r1.substr(0, 2), "1;");
  // The loss is the fourth column.
  std::size_t col = 0;
  for (int i = 0; i < 3; ++i) col = r1.find(';', col) + 1;
  const double loss1 = std::stod(r1.substr(col));
  EXPECT_EQ(loss1, h.history.at("loss")[1]) << "values are written exactly (shortest round-trip)";
  // append=true adds rows without a second header
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 50, .verbose = 0,
                        .callbacks = {std::make_shared<CSVLogger>(dir + "/log.csv", ';', true)}});
  std::ifstream again(dir + "/log.csv");
  std::stringstream ss;
  ss << again.rdbuf();
  EXPECT_EQ(ss.str().find("epoch;", 1), std::string::npos);
}

TEST(Callbacks, HooksRunInOrderAcrossCallbacks) {
  Data d;
  auto model = make_model();
  std::vector<std::string> log;
  auto make = [&](const std::string& n) {
    return std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_epoch_begin = [&log, n](int e, const Logs&) { log.push_back(n + ":eb" + std::to_string(e)); },
        .on_epoch_end = [&log, n](int e, const Logs&) { log.push_back(n + ":ee" + std::to_string(e)); },
        .on_train_batch_end = [&log, n](std::int64_t b, const Logs&) { log.push_back(n + ":be" + std::to_string(b)); },
        .on_train_begin = [&log, n](const Logs&) { log.push_back(n + ":tb"); },
        .on_train_end = [&log, n](const Logs&) { log.push_back(n + ":te"); }});
  };
  model->fit(d.x.slice(0, 100), d.y.slice(0, 100), {.epochs = 1, .batch_size = 50, .verbose = 0, .callbacks = {make("a"), make("b")}});
  const std::vector<std::string> want{"a:tb", "b:tb", "a:eb0", "b:eb0", "a:be0", "b:be0", "a:be1", "b:be1",
                                      "a:ee0", "b:ee0", "a:te", "b:te"};
  EXPECT_EQ(log, want);
}

TEST(TensorBoardCallback, WritesKerasTagsToTrainAndValidation) {
  const std::string dir = fresh_dir("tb");
  Data d;
  auto model = make_model();
  model->fit(d.x, d.y, {.epochs = 2, .batch_size = 50, .validation_split = 0.25, .verbose = 0,
                        .callbacks = {std::make_shared<TensorBoard>(TensorBoardOptions{
                            .log_dir = dir, .histogram_freq = 1, .update_freq = SaveFreq::every(1)})}});
  std::map<std::string, std::vector<std::int64_t>> train, val;
  for (const auto& [sub, out] : {std::pair{"train", &train}, std::pair{"validation", &val}})
    for (const auto& f : std::filesystem::directory_iterator(dir + "/" + sub))
      for (const auto& e : io::read_event_file(f.path().string()))
        for (const auto& v : e.values) (*out)[v.tag].push_back(e.step);
  EXPECT_EQ(train["epoch_loss"], (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(train["epoch_learning_rate"].size(), 2u);
  EXPECT_EQ(train["dense/kernel_0"].size(), 2u);
  EXPECT_EQ(train["batch_loss"].size(), 6u);
  EXPECT_EQ(train["model_summary"].size(), 1u);
  EXPECT_EQ(val["epoch_accuracy"], (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(val["evaluation_loss_vs_iterations"], (std::vector<std::int64_t>{3, 6}));
}

TEST(ReduceLROnPlateauAndScheduler, ChangeTheLearningRate) {
  Data d;
  auto model = make_model();
  auto sched = std::make_shared<LearningRateScheduler>([](int epoch, double lr) { return epoch == 0 ? lr : lr * 0.5; });
  model->fit(d.x, d.y, {.epochs = 3, .batch_size = 50, .verbose = 0, .callbacks = {sched}});
  EXPECT_DOUBLE_EQ(model->optimizer()->current_learning_rate(), 0.0025);
  auto plateau = std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{.monitor = "loss", .factor = 0.5, .patience = 1, .mode = "max"});
  model->fit(d.x, d.y, {.epochs = 3, .batch_size = 50, .verbose = 0, .callbacks = {plateau}});
  EXPECT_LT(model->optimizer()->current_learning_rate(), 0.0025);
}

// Keras 3's ReduceLROnPlateau and LearningRateScheduler write logs["learning_rate"] at each epoch's
// end (float32, as Keras reads the optimizer's variable), so History has it: the rate that epoch
// trained with, before a reduction at its end. Without them the logs have none.
TEST(ReduceLROnPlateauAndScheduler, PutTheEpochsRateInTheLogsAndHistory) {
  Data d;
  auto model = make_model();
  auto sched = std::make_shared<LearningRateScheduler>([](int epoch, double) { return 0.1 / (epoch + 1); });
  History h = model->fit(d.x, d.y, {.epochs = 3, .batch_size = 50, .verbose = 0, .callbacks = {sched}});
  EXPECT_EQ(h.history["learning_rate"], (std::vector<double>{static_cast<float>(0.1), static_cast<float>(0.05),
                                                             static_cast<float>(0.1 / 3)}));
  // mode "max" on the loss: every epoch after the first is no better, so patience 1 halves the rate
  // at each of their ends.
  auto plateau = std::make_shared<ReduceLROnPlateau>(
      ReduceLROnPlateauOptions{.monitor = "loss", .factor = 0.5, .patience = 1, .mode = "max"});
  model->optimizer()->set_learning_rate(0.08);
  h = model->fit(d.x, d.y, {.epochs = 3, .batch_size = 50, .verbose = 0, .callbacks = {plateau}});
  EXPECT_EQ(h.history["learning_rate"], (std::vector<double>{0.08f, 0.08f, 0.04f}));
  EXPECT_DOUBLE_EQ(model->optimizer()->current_learning_rate(), 0.02);
  h = model->fit(d.x, d.y, {.epochs = 1, .batch_size = 50, .verbose = 0});
  EXPECT_FALSE(h.history.contains("learning_rate"));
  // TensorBoard writes the rate once an epoch, the logs' where they have it.
  const std::string dir = fresh_dir("tb_lr");
  model->fit(d.x, d.y, {.epochs = 2, .batch_size = 50, .verbose = 0,
                        .callbacks = {sched, std::make_shared<TensorBoard>(TensorBoardOptions{.log_dir = dir})}});
  std::vector<std::pair<std::int64_t, double>> rates;
  for (const auto& f : std::filesystem::directory_iterator(dir + "/train"))
    for (const auto& e : io::read_event_file(f.path().string()))
      for (const auto& v : e.values)
        if (v.tag == "epoch_learning_rate") rates.emplace_back(e.step, v.scalar);
  EXPECT_EQ(rates, (std::vector<std::pair<std::int64_t, double>>{{0, 0.1f}, {1, 0.05f}}));
}

// Where Keras 3 raises TypeError (the optimizer's learning_rate setter) a callback that sets the
// rate of an optimizer made with a schedule stops fit with it: the schedule was silently replaced.
TEST(ReduceLROnPlateauAndScheduler, RefuseAnOptimizerMadeWithASchedule) {
  Data d;
  auto model = make_model();
  const optimizers::Schedule schedule = optimizers::schedules::ExponentialDecay(0.01, 4, 0.5);
  model->compile(optimizers::get("adam", schedule), losses::SparseCategoricalCrossentropy());
  auto sched = std::make_shared<LearningRateScheduler>([](int, double lr) { return lr; });
  EXPECT_THROW(model->fit(d.x, d.y, {.epochs = 2, .batch_size = 50, .verbose = 0, .callbacks = {sched}}), TypeError);
  auto plateau = std::make_shared<ReduceLROnPlateau>(
      ReduceLROnPlateauOptions{.monitor = "loss", .factor = 0.5, .patience = 0, .mode = "max"});
  EXPECT_THROW(model->fit(d.x, d.y, {.epochs = 2, .batch_size = 50, .verbose = 0, .callbacks = {plateau}}), TypeError);
  EXPECT_EQ(model->optimizer()->learning_rate_at(8), schedule(8)) << "the schedule stays";
}

TEST(BackupAndRestore, SavesEachEpochAndRestoresAtTrainBegin) {
  const std::string dir = fresh_dir("backup");
  Data d;
  auto model = make_model();
  auto backup = std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{.backup_dir = dir, .delete_checkpoint = false});
  model->fit(d.x, d.y, {.epochs = 2, .batch_size = 50, .verbose = 0, .callbacks = {backup}});
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoint"));
  auto fresh = make_model();
  auto restore = std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{.backup_dir = dir});
  restore->set_model(fresh.get());
  restore->on_train_begin({});
  ASSERT_TRUE(restore->restored_state());
  EXPECT_EQ(restore->restored_state()->epoch, 2);
  EXPECT_EQ(restore->restored_state()->iterations, 8);
  EXPECT_EQ(fresh->optimizer()->iterations(), 8);
  EXPECT_EQ(fresh->variables()[0].value().to_vector<float>(), model->variables()[0].value().to_vector<float>());
}

// The run's configuration travels with every backup, so a resume can check it (lockstep train).
TEST(BackupAndRestore, StoresTheRunConfigurationInEveryBackup) {
  const std::string dir = fresh_dir("backup_config");
  Data d;
  auto model = make_model();
  const std::map<std::string, std::string> config{{"--learning-rate", "0.001"}, {"--optimizer", "adam"}};
  auto backup = std::make_shared<BackupAndRestore>(
      BackupAndRestoreOptions{.backup_dir = dir, .delete_checkpoint = false, .run_config = config});
  model->fit(d.x, d.y, {.epochs = 1, .batch_size = 50, .verbose = 0, .callbacks = {backup}});
  const io::CheckpointManager manager(dir);
  ASSERT_TRUE(manager.latest());
  EXPECT_EQ(io::read_checkpoint(*manager.latest()).state.run_config, config);
}

// fit(steps_per_epoch) on a dataset of known length renews a used-up pass at the next epoch
// (Keras 3); a resumed run must find the same pass and place in it. 10 batches, 4 steps per
// epoch: epochs run 4, 4, 2 (the pass ends), then 4, 4 from a fresh, differently shuffled pass.
// Crashes after batch 10 (between the pass's end and its epoch's end) and 13 (inside pass 2).
TEST(BackupAndRestore, ResumeWithStepsPerEpochFindsItsPassAndPlace) {
  Data d;
  const Tensor x = d.x.slice(0, 10), y = d.y.slice(0, 10);
  const auto make_ds = [&] { return data::Dataset::from_tensor_slices(x, y).shuffle(10, 7).batch(1); };
  const FitOptions run{.epochs = 5, .steps_per_epoch = 4, .verbose = 0};
  set_random_seed(3);
  auto want = make_model();
  want->fit(make_ds(), run);
  ASSERT_EQ(want->optimizer()->iterations(), 18);
  for (int crash_after : {10, 13}) {
    SCOPED_TRACE("crash after batch " + std::to_string(crash_after));
    const std::string dir = fresh_dir("resume_passes_" + std::to_string(crash_after));
    {
      set_random_seed(3);
      auto crashed = make_model();
      int seen = 0;
      FitOptions o = run;
      o.callbacks = {std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{
                         .backup_dir = dir, .save_freq = SaveFreq::every(1), .delete_checkpoint = false}),
                     std::make_shared<LambdaCallback>(LambdaCallbackOptions{
                         .on_train_batch_end = [&](std::int64_t, const Logs&) {
                           if (++seen == crash_after) throw std::runtime_error("simulated crash");
                         }})};
      EXPECT_THROW(crashed->fit(make_ds(), o), std::runtime_error);
    }
    set_random_seed(3);
    auto resumed = make_model();
    FitOptions o = run;
    o.callbacks = {std::make_shared<BackupAndRestore>(
        BackupAndRestoreOptions{.backup_dir = dir, .save_freq = SaveFreq::every(1), .delete_checkpoint = false})};
    resumed->fit(make_ds(), o);
    EXPECT_EQ(resumed->optimizer()->iterations(), 18);
    for (std::size_t i = 0; i < want->variables().size(); ++i)
      EXPECT_EQ(resumed->variables()[i].value().to_vector<float>(), want->variables()[i].value().to_vector<float>())
          << want->variables()[i].name();
  }
}
