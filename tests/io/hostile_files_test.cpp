// Files edited by someone else (or by an attacker): every one is refused with an IOError naming
// the file, and none makes lockstep crash, read or delete outside its directory, or trust a
// value it did not check.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/checkpoint_manager.hpp"
#include "lockstep/io/safetensors.hpp"

using namespace lockstep;
using namespace lockstep::io;

namespace {
const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

struct Fixture {
  Variable k{Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), "dense/kernel"};
  optimizers::OptimizerPtr opt = optimizers::Adam(0.01);
  std::vector<Variable> vars() const { return {k}; }
};

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
}  // namespace

// 100,000-deep arrays once overflowed the stack while the error message was built.
TEST(HostileFiles, DeeplyNestedJsonIsRefusedInEveryRecord) {
  const std::string dir = fresh_dir("deep_json");
  Fixture a;
  CheckpointManager(dir).save(a.vars(), a.opt.get(), {});
  const std::string record = dir + "/ckpt-1.json";
  write(record, "{\"format\": \"lockstep-checkpoint\", \"format_version\": " + kDeep + "}");
  expect_io_error([&] { read_checkpoint(dir + "/ckpt-1"); }, {record, "nested deeper than 64 levels"});

  write(dir + "/checkpoint", "{\"all\": " + kDeep + "}");
  expect_io_error([&] { CheckpointManager m(dir); }, {dir + "/checkpoint", "nested deeper than 64 levels"});

  std::string header = "{\"t\": {\"dtype\": \"F32\", \"shape\": " + kDeep + ", \"data_offsets\": [0, 0]}}";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  write(dir + "/deep.safetensors", bytes + header);
  expect_io_error([&] { read_safetensors(dir + "/deep.safetensors"); },
                  {dir + "/deep.safetensors", "nested deeper than 64 levels"});
}
