#include <cfloat>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/io/event_file_reader.hpp"
#include "lockstep/io/event_file_writer.hpp"
#include "lockstep/io/histogram.hpp"
#include "lockstep/io/tfrecord.hpp"

using namespace lockstep;
using namespace lockstep::io;

namespace {
struct Fixture {
  Variable k{Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), "dense/kernel"};
  Variable b{Tensor::from_vector<float>({0.5f, -0.5f, 1}, {3}), "dense/bias"};
  optimizers::OptimizerPtr opt = optimizers::Adam(0.01);
  std::vector<Variable> vars() const { return {k, b}; }
  void step() {
    opt->apply_gradients({{Tensor::ones({2, 3}), k}, {Tensor::full({3}, 0.25f), b}});
  }
};
void flip_bit(const std::string& path, std::size_t at) {
  std::string s = read_file(path);
  s[at] = static_cast<char>(s[at] ^ 0x10);
  std::ofstream(path, std::ios::binary) << s;
}
}  // namespace

TEST(Checkpoint, RoundTripRestoresVariablesSlotsIterationsAndState) {
  const std::string dir = fresh_dir("ckpt_roundtrip");
  Fixture a;
  a.step();
  a.step();
  TrainingState st{.epoch = 3, .batch_in_epoch = 17, .seed = 0xdeadbeefcafe1234ull, .values = {{"es/best", 0.25}}};
  save_checkpoint(dir + "/ck", a.vars(), a.opt.get(), st);
  const auto rec = nlohmann::json::parse(read_file(dir + "/ck.json"));
  EXPECT_EQ(rec["format_version"], kCheckpointFormatVersion);
  EXPECT_EQ(rec["state"]["iterations"], 2);
  EXPECT_EQ(rec["tensors"].size(), 6u);  // 2 variables + 2 Adam slots each

  Fixture b;  // fresh weights, fresh optimizer
  b.k.assign(Tensor::zeros({2, 3}));
  const TrainingState got = load_checkpoint(dir + "/ck", b.vars(), b.opt.get());
  EXPECT_EQ(got.epoch, 3);
  EXPECT_EQ(got.batch_in_epoch, 17);
  EXPECT_EQ(got.seed, 0xdeadbeefcafe1234ull);
  EXPECT_EQ(got.iterations, 2);
  EXPECT_EQ(got.values.at("es/best"), 0.25);
  EXPECT_EQ(b.opt->iterations(), 2);
  EXPECT_EQ(b.k.value().to_vector<float>(), a.k.value().to_vector<float>());
  EXPECT_EQ(b.opt->slots(b.k)[1].second.to_vector<float>(), a.opt->slots(a.k)[1].second.to_vector<float>());
  // The next step from the restored state equals the next step of the original.
  a.step();
  b.step();
  EXPECT_EQ(b.k.value().to_vector<float>(), a.k.value().to_vector<float>());
}

TEST(Checkpoint, BitFlipTruncationVersionAndModelMismatchAreRejectedWithoutLoading) {
  const std::string dir = fresh_dir("ckpt_bad");
  Fixture a;
  a.step();
  save_checkpoint(dir + "/ck", a.vars(), a.opt.get(), {});
  const std::string good_st = read_file(dir + "/ck.safetensors");
  const std::string good_json = read_file(dir + "/ck.json");
  Fixture b;
  const auto before = b.k.value().to_vector<float>();

  flip_bit(dir + "/ck.safetensors", good_st.size() - 5);
  expect_io_error([&] { load_checkpoint(dir + "/ck", b.vars(), b.opt.get()); }, {dir + "/ck.safetensors", "CRC-32C"});
  std::ofstream(dir + "/ck.safetensors", std::ios::binary) << good_st.substr(0, good_st.size() - 10);
  expect_io_error([&] { load_checkpoint(dir + "/ck", b.vars(), b.opt.get()); }, {dir + "/ck.safetensors", "truncated"});
  std::ofstream(dir + "/ck.safetensors", std::ios::binary) << good_st;

  auto j = nlohmann::json::parse(good_json);
  j["format_version"] = 99;
  std::ofstream(dir + "/ck.json") << j.dump();
  expect_io_error([&] { load_checkpoint(dir + "/ck", b.vars(), b.opt.get()); }, {dir + "/ck.json", "version 99", "version " + std::to_string(kCheckpointFormatVersion)});
  std::ofstream(dir + "/ck.json") << good_json;

  Variable wrong_shape(Tensor::zeros({3, 2}), "dense/kernel");
  expect_io_error([&] { load_checkpoint(dir + "/ck", {wrong_shape, b.b}, nullptr); }, {"'dense/kernel'", "(2, 3)", "(3, 2)"});
  Variable missing(Tensor::zeros({3}), "dense_1/bias");
  expect_io_error([&] { load_checkpoint(dir + "/ck", {b.k, b.b, missing}, nullptr); }, {"'dense_1/bias'"});
  expect_io_error([&] { load_checkpoint(dir + "/ck", {b.k}, nullptr); }, {"does not have", "'dense/bias'"});
  EXPECT_EQ(b.k.value().to_vector<float>(), before) << "a rejected checkpoint must not be half-loaded";
  EXPECT_EQ(b.opt->iterations(), 0);
}

TEST(Checkpoint, NonChiefWritesNothing) {
  const std::string dir = fresh_dir("ckpt_nonchief");
  Fixture a;
  save_checkpoint(dir + "/ck", a.vars(), a.opt.get(), {}, {.is_chief = false});
  EXPECT_FALSE(std::filesystem::exists(dir + "/ck.json"));
}

TEST(CheckpointManager, PointerNamesLatestAndOldOnesAreDeleted) {
  const std::string dir = fresh_dir("ckpt_manager");
  Fixture a;
  {
    CheckpointManager m(dir, {.max_to_keep = 2});
    for (int i = 0; i < 3; ++i) {
      a.step();
      m.save(a.vars(), a.opt.get(), {.epoch = i});
    }
    EXPECT_EQ(m.checkpoints().size(), 2u);
  }
  CheckpointManager again(dir, {.max_to_keep = 2});
  ASSERT_TRUE(again.latest());
  EXPECT_EQ(*again.latest(), dir + "/ckpt-3");
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt-1.json"));
  Fixture b;
  EXPECT_EQ(load_checkpoint(*again.latest(), b.vars(), b.opt.get()).epoch, 2);
}

TEST(TFRecord, FramingIsCheckedOnRead) {
  const std::string a = frame_tfrecord("hello");
  ASSERT_EQ(a.size(), 5u + 16u);
  const auto back = parse_tfrecords(a + frame_tfrecord(""), "mem");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0], "hello");
  std::string bad = a;
  bad[14] ^= 1;
  expect_io_error([&] { parse_tfrecords(bad, "mem"); }, {"'mem'", "record 0", "data's CRC"});
  expect_io_error([&] { parse_tfrecords(a.substr(0, 18), "mem"); }, {"'mem'", "cut short"});
}

TEST(Histogram, DefaultBucketsAndBinningMatchTensorFlow) {
  const auto& lim = default_histogram_bucket_limits();
  EXPECT_EQ(lim.size(), 1551u);  // 774 edges 1e-12 * 1.1^k below 1e20, DBL_MAX, mirrored, and 0
  EXPECT_EQ(lim[775], 0.0);
  EXPECT_DOUBLE_EQ(lim[776], 1e-12);
  EXPECT_EQ(lim.back(), DBL_MAX);
  const std::vector<float> v{-1.0f, 0.0f, 0.5f, 0.5f, 2.0f};
  const HistogramData h = make_histogram(v.data(), v.size());
  EXPECT_EQ(h.num, 5);
  EXPECT_EQ(h.min, -1);
  EXPECT_EQ(h.max, 2);
  EXPECT_DOUBLE_EQ(h.sum, 2.0);
  EXPECT_DOUBLE_EQ(h.sum_squares, 5.5);
  double total = 0;
  for (double c : h.bucket) total += c;
  EXPECT_EQ(total, 5);
  EXPECT_LT(h.bucket.size(), 20u) << "empty runs must be merged";
  for (std::size_t i = 0; i < h.bucket.size(); ++i)
    if (h.bucket[i] == 2) {
      EXPECT_GT(h.bucket_limit[i], 0.5);  // 0.5 falls in [previous limit, limit)
    }
}

TEST(EventFile, WrittenEventsParseBackWithCheckedCrcs) {
  const std::string dir = fresh_dir("events");
  std::string path;
  {
    EventFileWriter w(dir + "/train");
    path = w.path();
    EXPECT_NE(std::filesystem::path(path).filename().string().find("events.out.tfevents."), std::string::npos);
    w.add_scalar("epoch_loss", 0.5, 0);
    w.add_scalar("epoch_loss", 0.25, 1);
    w.add_histogram("dense/kernel_0", Tensor::from_vector<float>({1, 2, 3}, {3}), 1);
    w.add_text("model_summary", "hello **world**", 0);
    w.flush();
  }
  const auto ev = read_event_file(path);
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[2].step, 1);
  ASSERT_EQ(ev[2].values.size(), 1u);
  EXPECT_EQ(ev[2].values[0].tag, "epoch_loss");
  EXPECT_EQ(ev[2].values[0].scalar, 0.25);
  EXPECT_EQ(ev[3].values[0].kind, EventValue::Kind::kHistogram);
  EXPECT_EQ(ev[3].values[0].histogram.num, 3);
  EXPECT_EQ(ev[4].values[0].kind, EventValue::Kind::kText);
  EXPECT_EQ(ev[4].values[0].plugin_name, "text");
  EXPECT_EQ(ev[4].values[0].text, "hello **world**");
  EXPECT_GT(ev[1].wall_time, 1.6e9);
  flip_bit(path, read_file(path).size() - 8);
  expect_io_error([&] { read_event_file(path); }, {path, "record 4", "CRC"});
}

TEST(EventFile, UnwritableLogdirIsNamed) {
  const std::string dir = fresh_dir("events_bad");
  std::ofstream(dir + "/file") << "x";
  expect_io_error([&] { EventFileWriter w(dir + "/file/sub"); }, {dir + "/file/sub"});
}
