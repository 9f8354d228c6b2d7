// Byte stamps over every header region of the zip-based files (issue 41, acceptance 2): a valid
// .npz (stored and deflated) and a valid .keras, written by lockstep's own writers, get 8 bytes of
// all-ones, all-zeros or random bytes stamped at each offset of their local headers, central
// directory, end record, .npy headers and config.json, and are loaded. Every outcome must be a
// clean lockstep error or a good load: no other exception, no signal, and no allocation past a
// 1 GB address-space allowance (unsanitized builds; ASan reserves terabytes of shadow).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "io/io_test_util.hpp"
#include "io/zip_test_util.hpp"
#include "lockstep/data/npz.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/training/saved_model.hpp"
#include "lockstep/training/sequential.hpp"
#include "common/cpu_time.hpp"

namespace lockstep::io {
namespace {

using ziptest::get16;
using ziptest::get32;

struct Region {
  std::size_t begin, end;
  std::string what;
};

// The header regions of a zip lockstep wrote (no comment): each local header with its name, the
// central directory, the end record, and the first `payload` bytes of each entry's data (an .npy
// header, or all of config.json) when `payload_of` says so.
std::vector<Region> header_regions(const std::string& zip, const std::function<std::size_t(const std::string&)>& payload_of) {
  const std::size_t end = zip.size() - 22;
  const std::uint32_t count = get16(zip, end + 10), cd = get32(zip, end + 16);
  std::vector<Region> out{{cd, end, "central directory"}, {end, zip.size(), "end record"}};
  for (std::size_t i = 0, at = cd; i < count; ++i) {
    const std::string name = zip.substr(at + 46, get16(zip, at + 28));
    const std::size_t local = get32(zip, at + 42), packed = get32(zip, at + 20);
    const std::size_t data = local + 30 + get16(zip, local + 26) + get16(zip, local + 28);
    out.push_back({local, data, "local header of " + name});
    const std::size_t n = std::min(payload_of(name), packed);
    if (n > 0) out.push_back({data, data + n, "data of " + name});
    at += 46 + get16(zip, at + 28) + get16(zip, at + 30) + get16(zip, at + 32);
  }
  return out;
}

// Lowers this process's soft address-space limit to what it maps now plus `extra` for the
// scope (the hard limit is kept, so it can be restored). Off under sanitizers.
class AddressSpaceAllowance {
 public:
  explicit AddressSpaceAllowance(std::uint64_t extra) {
    if (ziptest::kSanitized || getrlimit(RLIMIT_AS, &saved_) != 0) return;
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0;
    statm >> pages;
    rlimit lowered = saved_;
    lowered.rlim_cur = pages * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) + extra;
    active_ = setrlimit(RLIMIT_AS, &lowered) == 0;
  }
  ~AddressSpaceAllowance() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
  }

 private:
  rlimit saved_{};
  bool active_ = false;
};

// Stamps every region at every `stride`-th offset with each pattern, writes the result to `path`
// and calls `load`. Returns a description of each outcome that is not a lockstep error or a load.
std::vector<std::string> fuzz(const std::string& good, const std::vector<Region>& regions, const std::string& path,
                              std::size_t stride, const std::function<void()>& load, int& loads, int& loaded) {
  std::mt19937 rng(41);
  std::vector<std::string> bad;
  const AddressSpaceAllowance allowance(1ull << 30);
  for (const Region& r : regions) {
    for (std::size_t at = r.begin; at < r.end; at += stride) {
      for (int pattern = 0; pattern < 3; ++pattern) {
        std::string b = good;
        for (std::size_t i = at; i < std::min(at + 8, b.size()); ++i)
          b[i] = pattern == 0 ? '\xff' : pattern == 1 ? '\0' : static_cast<char>(rng() & 0xff);
        std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
        ++loads;
        try {
          load();
          ++loaded;
        } catch (const Error&) {
        } catch (const std::exception& e) {
          bad.push_back(r.what + " +" + std::to_string(at - r.begin) + " pattern " + std::to_string(pattern) + ": " +
                        e.what());
        }
      }
    }
  }
  return bad;
}

TEST(ZipFuzz, StampedHeadersOfNpzAndKerasFilesFailCleanly) {
  const double start = test::thread_cpu_seconds();
  const std::string dir = fresh_dir("zip_fuzz");
  int loads = 0, loaded = 0;
  std::vector<std::string> bad;
  const std::map<std::string, Tensor> arrays = {
      {"x_train", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2})},
      {"y_train", Tensor::from_vector<std::int64_t>({0, 1, 1}, {3})},
      {"x_test", Tensor::zeros({2, 2}, DType::kU8)}};
  for (const bool compress : {false, true}) {
    const std::string good_path = dir + (compress ? "/good_deflated.npz" : "/good.npz");
    data::write_npz(good_path, arrays, {.compress = compress});
    const std::string good = read_file(good_path);
    const auto regions = header_regions(good, [&](const std::string&) { return compress ? 64 : 128; });
    const std::string path = dir + "/stamped.npz";
    for (auto& b : fuzz(good, regions, path, 1, [&] { data::read_npz(path); }, loads, loaded)) bad.push_back(b);
  }
  {
    Sequential m({layers::Dense(3, "relu", 2), layers::Dense(2, "softmax")}, "fuzzed");
    m.compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    const std::string good_path = dir + "/good.keras";
    save_model(m, good_path);
    const std::string good = read_file(good_path);
    const auto regions = header_regions(good, [](const std::string& name) { return name == "config.json" ? 1u << 20 : 0u; });
    const std::string path = dir + "/stamped.keras";
    // config.json is ~2 KB: every third offset (8-byte stamps still cover every byte).
    for (auto& b : fuzz(good, regions, path, 3, [&] { load_model(path); }, loads, loaded)) bad.push_back(b);
  }
  for (std::size_t i = 0; i < std::min<std::size_t>(bad.size(), 20); ++i) ADD_FAILURE() << bad[i];
  EXPECT_TRUE(bad.empty()) << bad.size() << " of " << loads << " stamped loads ended in another exception";
  EXPECT_GT(loads, 3000);
  const double seconds = test::thread_cpu_seconds() - start;
  std::printf("%d stamped loads in %.1f CPU s: %d loaded, %d clean errors, %zu other\n", loads, seconds, loaded,
              loads - loaded - static_cast<int>(bad.size()), bad.size());
  EXPECT_LT(seconds, ziptest::kSanitized ? 120.0 : 30.0) << loads << " loads";
}

}  // namespace
}  // namespace lockstep::io
