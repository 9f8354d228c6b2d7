// NPZ and CSV readers, InputContext and batch splitting.
#include <gtest/gtest.h>

#include "lockstep/data/csv.hpp"
#include "lockstep/data/input_context.hpp"
#include "lockstep/data/npz.hpp"
#include "pipeline_util.hpp"
#include "test_util.hpp"

using namespace lockstep;
using namespace lockstep::data;

namespace {

std::string fixture(const std::string& name) { return std::string(LOCKSTEP_SOURCE_DIR) + "/tests/data/fixtures/" + name; }

}  // namespace

TEST(DataNpz, RoundTripStoredAndDeflated) {
  test::TempDir dir;
  const std::map<std::string, Tensor> arrays{
      {"x", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
      {"y", Tensor::from_vector<std::int64_t>({7, 8}, {2})},
      {"img", Tensor::from_vector<std::uint8_t>(std::vector<std::uint8_t>(1000, 9), {10, 100})}};
  for (bool compress : {false, true}) {
    const std::string path = dir.file(compress ? "c.npz" : "s.npz");
    write_npz(path, arrays, {.compress = compress});
    const auto got = read_npz(path);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got.at("x").shape(), (Shape{2, 3}));
    EXPECT_EQ(got.at("x").to_vector<float>(), arrays.at("x").to_vector<float>());
    EXPECT_EQ(got.at("y").to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, 8}));
    EXPECT_EQ(got.at("img").to_vector<std::uint8_t>(), arrays.at("img").to_vector<std::uint8_t>());
  }
}

TEST(DataNpz, ReadsPythonZipfileArchives) {
  // Written by fixtures/make_npz_fixtures.py as numpy.savez does (zipfile, force_zip64).
  for (const char* name : {"savez.npz", "savez_compressed.npz"}) {
    const auto got = read_npz(fixture(name));
    ASSERT_EQ(got.size(), 2u) << name;
    EXPECT_EQ(got.at("a").shape(), (Shape{2, 3})) << name;
    EXPECT_EQ(got.at("a").to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5})) << name;
    EXPECT_EQ(got.at("labels").to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 1, 4, 1, 5})) << name;
  }
}

TEST(DataNpz, DamagedArchivesNameTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("a.npz");
  write_npz(path, {{"x", Tensor::from_vector<float>(std::vector<float>(300, 1.f), {300})}}, {.compress = true});
  const std::string good = test::read_bytes(path);
  test::expect_io_error([&] { read_npz(dir.file("missing.npz")); }, {"missing.npz", "cannot open"});
  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, good.size() / 2, good.size() - 5}) {
    test::write_bytes(path, good.substr(0, cut));
    test::expect_io_error([&] { read_npz(path); }, {path});
  }
  std::string flipped = good;
  flipped[60] ^= 0x55;  // inside the deflated member
  test::write_bytes(path, flipped);
  test::expect_io_error([&] { read_npz(path); }, {path, "x.npy"});
  test::write_bytes(path, "not a zip at all, just some text that is long enough");
  test::expect_io_error([&] { read_npz(path); }, {path, "not an .npz"});
}

TEST(DataCsv, ColumnsDtypesQuotesAndDataset) {
  test::TempDir dir;
  const std::string path = dir.file("t.csv");
  test::write_bytes(path, "a,b,\"label, quoted\"\r\n1.5,2,3\n\n-2, 4 ,\"5\"\n");
  const CsvTable t = read_csv(path, {.column_dtypes = {DType::kF32, DType::kI64, DType::kI32}});
  EXPECT_EQ(t.names, (std::vector<std::string>{"a", "b", "label, quoted"}));
  EXPECT_EQ(t.columns[0].to_vector<float>(), (std::vector<float>{1.5f, -2.f}));
  EXPECT_EQ(t.columns[1].to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(t.columns[2].to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 5}));
  const Dataset rows = make_csv_dataset(path, {.column_dtypes = {DType::kF32, DType::kI64, DType::kI32}});
  EXPECT_EQ(rows.cardinality(), 2);
  EXPECT_EQ(test::ints(rows, 1), (std::vector<std::int64_t>{2, 4}));
  test::write_bytes(path, "9007199254740993;1\n");
  const CsvTable big = read_csv(path, {.header = false, .delimiter = ';', .column_dtypes = {DType::kI64, DType::kU8}});
  EXPECT_EQ(big.columns[0].to_vector<std::int64_t>()[0], 9007199254740993);  // all 64 bits
  EXPECT_EQ(big.names, (std::vector<std::string>{"0", "1"}));
}

TEST(DataCsv, MissingValues) {
  test::TempDir dir;
  const std::string path = dir.file("m.csv");
  test::write_bytes(path, "x,y\n1,2\n3,\n5\n");
  test::expect_io_error([&] { read_csv(path); }, {path, "line 3", "column 2", "missing"});
  const CsvTable t = read_csv(path, {.missing = CsvMissing::kDefault, .defaults = {-1, -9}});
  EXPECT_EQ(t.columns[1].to_vector<float>(), (std::vector<float>{2, -9, -9}));
  test::write_bytes(path, "x,y\n1,2\n3,abc\n");
  test::expect_io_error([&] { read_csv(path); }, {path, "line 3", "column 2", "abc"});
  test::write_bytes(path, "x,y\n1,2\n3,4,5\n");
  test::expect_io_error([&] { read_csv(path); }, {path, "line 3", "3 fields"});
  test::write_bytes(path, "x\n300\n");
  test::expect_io_error([&] { read_csv(path, {.column_dtypes = {DType::kU8}}); }, {path, "line 2", "uint8"});
  test::write_bytes(path, "x\n\"open\n");
  test::expect_io_error([&] { read_csv(path); }, {path, "not closed"});
  test::expect_io_error([&] { read_csv(dir.file("nope.csv")); }, {"nope.csv"});
  test::write_bytes(path, "x,y\n1,2\n");
  EXPECT_THROW(read_csv(path, {.column_dtypes = {DType::kF32}}), ValueError);
}

TEST(DataInputContext, PerReplicaBatchAndSplit) {
  const InputContext ctx{.num_input_pipelines = 2, .input_pipeline_id = 1, .num_replicas_in_sync = 4};
  EXPECT_EQ(ctx.get_per_replica_batch_size(64), 16);
  EXPECT_THROW(ctx.get_per_replica_batch_size(30), ValueError);
  EXPECT_THROW((InputContext{.num_input_pipelines = 2, .input_pipeline_id = 2}).validate(), ValueError);

  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 3, 4}, {5});
  const auto parts = split_batch_for_replicas({x, y}, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0][0].dim(0), 2);
  EXPECT_EQ(parts[1][0].dim(0), 2);
  EXPECT_EQ(parts[2][0].dim(0), 1);
  EXPECT_EQ(parts[2][1].to_vector<std::int64_t>(), (std::vector<std::int64_t>{4}));
  EXPECT_EQ(parts[1][0].raw_data(), static_cast<const char*>(x.raw_data()) + 4 * sizeof(float));  // a view
  const auto sparse = split_batch_for_replicas({y.slice(0, 2)}, 4);
  EXPECT_EQ(sparse[2][0].dim(0), 0);
  EXPECT_EQ(sparse[3][0].dim(0), 0);
  EXPECT_THROW(split_batch_for_replicas({x, y.slice(0, 3)}, 2), ValueError);
}

TEST(DataInputContext, ShardFiles) {
  const std::vector<std::string> files{"a", "b", "c", "d", "e"};
  EXPECT_EQ(shard_files(files, 2, 0), (std::vector<std::string>{"a", "c", "e"}));
  EXPECT_EQ(shard_files(files, 2, 1), (std::vector<std::string>{"b", "d"}));
  EXPECT_THROW(shard_files(files, 6, 0), ValueError);
  EXPECT_THROW(shard_files(files, 2, 2), ValueError);
}
