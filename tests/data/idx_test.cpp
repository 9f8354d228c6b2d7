#include <cstring>
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

#include "data/test_util.hpp"
#include "lockstep/data/idx.hpp"

using namespace lockstep;
using lockstep::data::read_idx;
using lockstep::data::write_idx;
using lockstep::test::expect_io_error;
using lockstep::test::read_bytes;
using lockstep::test::TempDir;
using lockstep::test::write_bytes;

namespace {

std::string gzip_bytes(const std::string& raw) {
  TempDir dir;
  gzFile gz = gzopen(dir.file("z").c_str(), "wb");
  gzwrite(gz, raw.data(), static_cast<unsigned>(raw.size()));
  gzclose(gz);
  return read_bytes(dir.file("z"));
}

// The header of a uint8 IDX file of the given dims.
std::string idx_header(unsigned char type, std::initializer_list<std::uint32_t> dims) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (auto d : dims) {
    for (int b = 3; b >= 0; --b) s += static_cast<char>((d >> (8 * b)) & 0xff);
  }
  return s;
}

}  // namespace

TEST(DataIdx, RoundTripsRawAndGzipForEveryDtype) {
  TempDir dir;
  std::vector<std::uint8_t> bytes(60);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  const Tensor u8 = Tensor::from_vector(bytes, {3, 4, 5});
  const Tensor i32 = Tensor::from_vector<std::int32_t>({-1, 2, 70000, -123456}, {4});
  const Tensor f32 = Tensor::from_vector<float>({0.5f, -1.25f, 3e8f, 0.f, 1.f, 2.f}, {2, 3});
  for (bool gzip : {false, true}) {
    for (const Tensor* t : {&u8, &i32, &f32}) {
      const std::string path = dir.file("t.idx");
      write_idx(path, *t, {.gzip = gzip});
      const Tensor back = read_idx(path);
      EXPECT_EQ(back.shape(), t->shape());
      ASSERT_EQ(back.dtype(), t->dtype());
      EXPECT_EQ(std::memcmp(back.raw_data(), t->raw_data(), t->nbytes()), 0);
    }
  }
}

TEST(DataIdx, WritesBigEndianAsMnistDoes) {
  TempDir dir;
  write_idx(dir.file("l"), Tensor::from_vector<std::uint8_t>({7, 2, 1}, {3}));
  EXPECT_EQ(read_bytes(dir.file("l")), idx_header(0x08, {3}) + std::string("\x07\x02\x01", 3));
  write_idx(dir.file("i"), Tensor::from_vector<std::int32_t>({0x01020304}, {1}));
  EXPECT_EQ(read_bytes(dir.file("i")), idx_header(0x0C, {1}) + std::string("\x01\x02\x03\x04", 4));
}

TEST(DataIdx, DetectsGzipByMagicNotByName) {
  TempDir dir;
  const std::string raw = idx_header(0x08, {2, 2}) + std::string("\x01\x02\x03\x04", 4);
  write_bytes(dir.file("compressed.idx"), gzip_bytes(raw));  // gzip without .gz
  write_bytes(dir.file("plain.gz"), raw);                    // raw with .gz
  for (const char* name : {"compressed.idx", "plain.gz"}) {
    const Tensor t = read_idx(dir.file(name));
    EXPECT_EQ(t.shape(), (Shape{2, 2})) << name;
    EXPECT_EQ(t.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 2, 3, 4})) << name;
  }
}

TEST(DataIdx, MissingFileNamesPath) {
  TempDir dir;
  expect_io_error([&] { read_idx(dir.file("nope-idx3-ubyte")); }, {dir.file("nope-idx3-ubyte"), "cannot open"});
}

TEST(DataIdx, WrongMagicNamesPath) {
  TempDir dir;
  write_bytes(dir.file("bad"), std::string("\x12\x34\x08\x01\x00\x00\x00\x01\x05", 9));
  expect_io_error([&] { read_idx(dir.file("bad")); }, {dir.file("bad"), "magic", "0x12340801"});
  write_bytes(dir.file("type"), idx_header(0x42, {1}) + "x");
  expect_io_error([&] { read_idx(dir.file("type")); }, {dir.file("type"), "0x42"});
  write_bytes(dir.file("i16"), idx_header(0x0B, {1}) + "xx");
  expect_io_error([&] { read_idx(dir.file("i16")); }, {dir.file("i16"), "int16", "not supported"});
  write_bytes(dir.file("empty"), "");
  expect_io_error([&] { read_idx(dir.file("empty")); }, {dir.file("empty"), "truncated"});
}

TEST(DataIdx, TruncatedRawAndGzipNamePath) {
  TempDir dir;
  const std::string short_data = idx_header(0x08, {10, 28, 28}) + std::string(100, '\x01');
  write_bytes(dir.file("raw"), short_data);
  expect_io_error([&] { read_idx(dir.file("raw")); }, {dir.file("raw"), "truncated", "(10, 28, 28)"});
  write_bytes(dir.file("gz"), gzip_bytes(short_data));
  expect_io_error([&] { read_idx(dir.file("gz")); }, {dir.file("gz"), "truncated"});
  write_bytes(dir.file("dims"), idx_header(0x08, {3, 28, 28}).substr(0, 10));  // cut inside the dimensions
  expect_io_error([&] { read_idx(dir.file("dims")); }, {dir.file("dims"), "truncated", "dimensions"});
  // A gzip stream cut short: zlib reports it, we name the file.
  const std::string whole = gzip_bytes(idx_header(0x08, {1000}) + std::string(1000, '\x05'));
  write_bytes(dir.file("cut.gz"), whole.substr(0, whole.size() / 2));
  expect_io_error([&] { read_idx(dir.file("cut.gz")); }, {dir.file("cut.gz")});
}

TEST(DataIdx, HugeDimensionsAreRejectedBeforeAllocating) {
  TempDir dir;
  write_bytes(dir.file("huge"), idx_header(0x0D, {0x7fffffff, 0x7fffffff}) + "abcd");
  expect_io_error([&] { read_idx(dir.file("huge")); }, {dir.file("huge"), "truncated"});
  write_bytes(dir.file("overflow"), idx_header(0x0D, {0x7fffffff, 0x7fffffff, 0x7fffffff, 0}));
  expect_io_error([&] { read_idx(dir.file("overflow")); }, {dir.file("overflow"), "overflow"});
  write_bytes(dir.file("huge.gz"), gzip_bytes(idx_header(0x08, {0x7fffffff, 0x7fffffff}) + "abcd"));
  expect_io_error([&] { read_idx(dir.file("huge.gz")); }, {dir.file("huge.gz"), "truncated"});
}

TEST(DataIdx, TrailingDataIsRejected) {
  TempDir dir;
  write_bytes(dir.file("t"), idx_header(0x08, {2}) + "abc");
  expect_io_error([&] { read_idx(dir.file("t")); }, {dir.file("t"), "trailing"});
  write_bytes(dir.file("t.gz"), gzip_bytes(idx_header(0x08, {2}) + "abc"));
  expect_io_error([&] { read_idx(dir.file("t.gz")); }, {dir.file("t.gz"), "trailing"});
}

TEST(DataIdx, CorruptedFilesNeverCrash) {
  TempDir dir;
  const std::string raw = idx_header(0x0C, {3, 4}) + std::string(48, '\x11');
  const std::string gz = gzip_bytes(raw);
  std::mt19937 rng(1234);
  int errors = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = trial % 2 ? gz : raw;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (trial % 5 == 0) bytes.resize(rng() % bytes.size());
    write_bytes(dir.file("fuzz"), bytes);
    try {
      read_idx(dir.file("fuzz"));
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("fuzz")), std::string::npos) << e.what();
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(DataIdx, WriteRejectsDtypesIdxLacks) {
  TempDir dir;
  EXPECT_THROW(write_idx(dir.file("x"), Tensor::zeros({2}, DType::kI64)), ValueError);
  EXPECT_THROW(write_idx(dir.file("x"), Tensor::scalar(1.f)), ValueError);
  expect_io_error([&] { write_idx(dir.file("no/such/dir/x"), Tensor::zeros({2})); }, {dir.file("no/such/dir/x")});
}
