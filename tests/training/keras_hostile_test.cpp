// Hostile .keras archives (issue 41, items 4, 7 and 10): overlapping zip entries, a config asking
// for weights the file cannot fill (units: 100,000,000), integer arguments given fractions or
// absurd values, and a layer's name given twice. Each is an IOError naming the file, the layer or
// entry and the problem, before anything large is allocated.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/zip_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/normalization_layers.hpp"
#include "lockstep/training/functional.hpp"
#include "lockstep/training/saved_model.hpp"
#include "training/layer_config.hpp"
#include "training/model_io_test_util.hpp"
#include "common/cpu_time.hpp"

namespace lockstep {
namespace {
using nlohmann::json;

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

class HostileKeras : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir("keras_hostile", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    Sequential m({layers::Dense(8, "relu", 4), layers::BatchNormalization(), layers::Dense(2, "softmax")}, "mlp");
    save_model(m, dir_ + "/good.keras");
    bytes_ = io::read_file(dir_ + "/good.keras");
    entries_ = io::decode_zip(bytes_, "good.keras");
    config_ = json::parse(io::find_entry(entries_, "config.json")->bytes);
  }
  // Writes `bytes` as dir/name and returns load_model's message, which must name the file.
  std::string load_message(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    io::write_file_atomic(path, bytes);
    std::string m = test::io_message_of([&] { load_model(path); });
    EXPECT_HAS(m, name);
    return m;
  }
  // The archive with config_ as it is now.
  std::string with_config() {
    auto copy = entries_;
    for (auto& e : copy)
      if (e.name == "config.json") e.bytes = config_.dump();
    return io::encode_zip(copy);
  }
  json& layer_config(std::size_t i) { return config_["config"]["layers"][i]["config"]; }
  std::string dir_;
  std::string bytes_;
  std::vector<io::ZipEntry> entries_;
  json config_;
};

TEST_F(HostileKeras, OverlappingEntriesAreRefused) {
  // 40 more directory entries over model.weights.h5 (entry 2: metadata, config, weights).
  const std::string m = load_message("overlap.keras", ziptest::with_aliases(bytes_, 40, 2));
  EXPECT_HAS(m, "'model.weights.h5'");
  EXPECT_HAS(m, "overlap");
}

TEST_F(HostileKeras, ADirectoryOrADeviceIsNamedNotRead) {
  std::filesystem::create_directories(dir_ + "/folder.keras");
  EXPECT_HAS(test::io_message_of([&] { load_model(dir_ + "/folder.keras"); }), "folder.keras' is a directory");
  std::filesystem::create_symlink("/dev/zero", dir_ + "/zero.keras");
  EXPECT_LT(test::thread_cpu_seconds_of([&] {
    EXPECT_HAS(test::io_message_of([&] { load_model(dir_ + "/zero.keras"); }), "zero.keras' is not a regular file");
  }), 2.0);
}

TEST_F(HostileKeras, OnlyTheEntriesNeededAreInflated) {
  // metadata.json's bytes no longer match its CRC: the loader never reads it.
  std::string b = bytes_;
  const std::size_t at = b.find("keras_version");
  ASSERT_NE(at, std::string::npos);
  b[at] = 'K';
  const std::string path = dir_ + "/metadata.keras";
  io::write_file_atomic(path, b);
  EXPECT_NO_THROW(load_model(path));
}

TEST_F(HostileKeras, WeightsTheFileCannotFillAreRefusedBeforeAllocating) {
  layer_config(1)["units"] = 100'000'000;  // a [4, 1e8] kernel: 1.6 GB
  const std::string path = dir_ + "/units.keras";
  io::write_file_atomic(path, with_config());
  const std::string got = ziptest::load_in_bounded_child([&] { load_model(path); }, 1ull << 30);
  EXPECT_HAS(got, "error: Keras file '" + path + "': layer 'dense' (Dense): its weight 0 would have shape");
  EXPECT_HAS(got, "more than model.weights.h5 holds");
  EXPECT_HAS(got, "shape (4, 100000000)");
  EXPECT_HAS(got, "its layers/dense/vars/0 has shape (4, 8)");
  // A smaller mismatch is still named with both shapes (by the weights check after building).
  layer_config(1)["units"] = 9;
  const std::string m = load_message("units9.keras", with_config());
  EXPECT_HAS(m, "(4, 9)");
  EXPECT_HAS(m, "(4, 8)");
}

TEST_F(HostileKeras, IntegerArgumentsMustBeIntegers) {
  for (const json& units : {json(128.5), json(8.0), json(1e9)}) {
    layer_config(1)["units"] = units;
    const std::string m = load_message("units.keras", with_config());
    EXPECT_HAS(m, "layer 'dense' (Dense): Dense: argument units=" + units.dump() + " must be an integer");
  }
  layer_config(1)["units"] = std::int64_t{1} << 40;  // no layer argument reaches 2^31
  EXPECT_HAS(load_message("units.keras", with_config()),
             "layer 'dense' (Dense): argument units=1099511627776 is not an integer the layer can take");
  layer_config(1)["units"] = 1e30;  // nlohmann's conversion of this to int64 is undefined
  EXPECT_HAS(load_message("huge.keras", with_config()), "layer 'dense' (Dense): argument units=1e+30 is out of range");
  layer_config(1)["units"] = -3;
  EXPECT_HAS(load_message("negative.keras", with_config()), "layer 'dense' (Dense)");
  // lockstep's own format reads layers through the same check.
  const json dense = {{"class_name", "Dense"},
                      {"config", layers::Dense(4)->get_config()}};
  json bad = dense;
  bad["config"]["units"] = 128.5;
  try {
    detail::layer_from_json(bad);
    ADD_FAILURE() << "units=128.5 was read";
  } catch (const IOError& e) {
    EXPECT_HAS(std::string(e.what()), "argument units=128.5");
  }
  EXPECT_NO_THROW(detail::layer_from_json(dense));
}

// A Sequential's layers have unique names (Keras' Sequential.add): a config that names two
// layers alike, or lists one layer twice, is an IOError naming the file, the layer and Keras'
// rule. A Functional's config alike (its calls name the layers they read).
TEST_F(HostileKeras, ALayerNameTwiceIsRefused) {
  const std::string rule = "All layers added to a Sequential model should have unique names. Name 'dense' is already "
                           "the name of a layer in this model.";
  layer_config(3)["name"] = "dense";
  const std::string renamed = load_message("renamed.keras", with_config());
  EXPECT_HAS(renamed, "layer 'dense' (Dense): ");
  EXPECT_HAS(renamed, rule);
  config_ = json::parse(io::find_entry(entries_, "config.json")->bytes);
  config_["config"]["layers"].push_back(config_["config"]["layers"][1]);
  EXPECT_HAS(load_message("repeated.keras", with_config()), rule);

  const KerasTensor in = Input({4});
  Functional f(in, call(layers::Dense(2, "softmax"), call(layers::Dense(8, "relu"), in)), "fun");
  save_model(f, dir_ + "/fun.keras");
  auto entries = io::decode_zip(io::read_file(dir_ + "/fun.keras"), "fun.keras");
  for (auto& e : entries)
    if (e.name == "config.json") {
      json c = json::parse(e.bytes);
      ASSERT_EQ(c["config"]["layers"][2]["name"], "dense_1");
      c["config"]["layers"][2]["name"] = "dense";
      e.bytes = c.dump();
    }
  EXPECT_HAS(load_message("fun_renamed.keras", io::encode_zip(entries)), "two layers are named 'dense'");
}

}  // namespace
}  // namespace lockstep
