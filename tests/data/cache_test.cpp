// cache() and cache(path): replay without running upstream, staleness, damaged files.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "pipeline_util.hpp"
#include "data/fingerprint.hpp"
#include "test_util.hpp"

using namespace lockstep;
using data::Dataset;
using data::Element;
using test::ints;
using test::iota_vec;

namespace {

// A pipeline over `x` whose map counts its calls.
Dataset counted(const Tensor& x, std::atomic<int>* calls, std::int64_t parallel = 1) {
  return Dataset::from_tensor_slices(x).map(
      [calls](Element e) {
        ++*calls;
        return Element{e[0], test::scalar_i64(7)};
      },
      parallel);
}

Tensor data_tensor(std::int64_t n, std::int64_t offset = 0) {
  return Tensor::from_vector<std::int64_t>(iota_vec(offset, offset + n), {n});
}

}  // namespace

TEST(DataCache, MemoryRecordsOnceAndReplays) {
  std::atomic<int> calls{0};
  const Dataset ds = counted(data_tensor(10), &calls).cache();
  EXPECT_EQ(ints(ds), iota_vec(0, 10));
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(ints(ds.repeat(3)).size(), 30u);
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(ds.cardinality(), 10);
}

TEST(DataCache, MemoryAbandonedPassRecordsNothing) {
  std::atomic<int> calls{0};
  const Dataset ds = counted(data_tensor(10), &calls).cache();
  {
    auto it = ds.make_iterator();
    it->next();
    it->next();
  }
  EXPECT_EQ(ints(ds), iota_vec(0, 10));  // a full pass now records
  const int after = calls;
  EXPECT_EQ(ints(ds), iota_vec(0, 10));
  EXPECT_EQ(calls, after);
}

TEST(DataCache, FileSurvivesASecondRun) {
  test::TempDir dir;
  const std::string path = dir.file("cache.bin");
  const Tensor x = data_tensor(25);
  std::atomic<int> calls{0};
  EXPECT_EQ(ints(counted(x, &calls, 3).cache(path)), iota_vec(0, 25));
  EXPECT_EQ(calls, 25);
  ASSERT_TRUE(std::filesystem::exists(path));
  // "A second run": a new pipeline object, built the same way.
  std::atomic<int> calls2{0};
  const Dataset again = counted(x, &calls2, 3).cache(path);
  EXPECT_EQ(ints(again), iota_vec(0, 25));
  EXPECT_EQ(ints(again, 1), std::vector<std::int64_t>(25, 7));
  EXPECT_EQ(ints(again.repeat(2)).size(), 50u);
  EXPECT_EQ(calls2, 0);
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(f.path().filename(), "cache.bin");  // no temporary left behind
  }
}

TEST(DataCache, FileIsRebuiltWhenStale) {
  test::TempDir dir;
  const std::string path = dir.file("cache.bin");
  std::atomic<int> calls{0};
  ints(counted(data_tensor(10), &calls).cache(path));
  // Other data, same pipeline: stale.
  ints(counted(data_tensor(10, 100), &calls).cache(path));
  EXPECT_EQ(calls, 20);
  EXPECT_EQ(ints(counted(data_tensor(10, 100), &calls).cache(path)), iota_vec(100, 110));
  EXPECT_EQ(calls, 20);
  // Same data, another pipeline: stale.
  EXPECT_EQ(ints(counted(data_tensor(10, 100), &calls).take(4).cache(path)), iota_vec(100, 104));
  EXPECT_EQ(calls, 24);
}

TEST(DataCache, TruncatedOrCorruptFileIsRebuilt) {
  test::TempDir dir;
  const std::string path = dir.file("cache.bin");
  std::atomic<int> calls{0};
  const Tensor x = data_tensor(40);
  ints(counted(x, &calls).cache(path));
  const std::string good = test::read_bytes(path);
  test::write_bytes(path, good.substr(0, good.size() - 50));  // a crash mid-write, or a full disk
  EXPECT_EQ(ints(counted(x, &calls).cache(path)), iota_vec(0, 40));
  EXPECT_EQ(calls, 80);
  EXPECT_EQ(test::read_bytes(path), good);
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x10;  // a flipped bit in the records
  test::write_bytes(path, flipped);
  EXPECT_EQ(ints(counted(x, &calls).cache(path)), iota_vec(0, 40));
  EXPECT_EQ(calls, 120);
}

TEST(DataCache, AbandonedPassLeavesNoFile) {
  test::TempDir dir;
  const std::string path = dir.file("cache.bin");
  std::atomic<int> calls{0};
  {
    auto it = counted(data_tensor(10), &calls).cache(path).make_iterator();
    it->next();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(DataCache, FileRoundTripsDtypesAndShapes) {
  test::TempDir dir;
  const Tensor img = Tensor::from_vector<std::uint8_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2});
  const Tensor f = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f}, {3});
  const Dataset ds = Dataset::from_tensor_slices(img, f).cache(dir.file("c"));
  for (int pass = 0; pass < 2; ++pass) {
    int i = 0;
    for (auto& e : ds) {
      EXPECT_EQ(e[0].shape(), (Shape{2, 2}));
      EXPECT_EQ(e[0].dtype(), DType::kU8);
      EXPECT_EQ(e[0].to_vector<std::uint8_t>()[0], 1 + 4 * i);
      EXPECT_EQ(e[1].shape(), Shape{});
      EXPECT_EQ(e[1].item(), 0.5f + i);
      ++i;
    }
    EXPECT_EQ(i, 3);
  }
}

TEST(DataCache, UnwritablePathIsAnIOError) {
  test::expect_io_error([] { ints(Dataset::range(3).cache("/nonexistent-dir/x/cache.bin")); },
                        {"/nonexistent-dir/x/cache.bin"});
}

TEST(DataCache, HashDoesNotDependOnChunking) {
  const std::string bytes = "the quick brown fox jumps over the lazy dog, twice over";
  data::detail::Hasher whole;
  whole.update(bytes);
  for (std::size_t step : {1, 3, 7, 8, 13}) {
    data::detail::Hasher parts;
    for (std::size_t i = 0; i < bytes.size(); i += step) parts.update(bytes.data() + i, std::min(step, bytes.size() - i));
    EXPECT_EQ(parts.digest(), whole.digest()) << step;
  }
}
