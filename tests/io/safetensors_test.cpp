#include <cstring>
#include <sys/mount.h>

#include <filesystem>
#include <fstream>

#include "io/fault_injection.hpp"
#include "io_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/crc32c.hpp"
#include "lockstep/io/safetensors.hpp"

using namespace lockstep;
using namespace lockstep::io;

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  std::string inc(32, 0);
  for (int i = 0; i < 32; ++i) inc[static_cast<std::size_t>(i)] = static_cast<char>(i);
  EXPECT_EQ(crc32c(inc), 0x46DD794Eu);
}

TEST(Crc32c, PortableAndHardwareAgreeAndExtend) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 131 + 7));
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 1000u})
    EXPECT_EQ(crc32c(s.data(), n), crc32c_extend_portable(0, s.data(), n)) << n;
  EXPECT_EQ(crc32c_extend(crc32c(s.data(), 300), s.data() + 300, 700), crc32c(s));
  EXPECT_EQ(unmask_crc32c(mask_crc32c(0x12345678u)), 0x12345678u);
}

TEST(Safetensors, RoundTripKeepsOrderDtypesAndMetadata) {
  const std::string dir = fresh_dir("st_roundtrip");
  NamedTensors in{{"b/kernel", Tensor::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3})},
                  {"a/ids", Tensor::from_vector<std::int64_t>({7, -8}, {2})},
                  {"c/i32", Tensor::from_vector<std::int32_t>({9}, {1, 1})},
                  {"d/bytes", Tensor::from_vector<std::uint8_t>({1, 2, 3}, {3})},
                  {"e/empty", Tensor::zeros({0, 4})},
                  {"f/scalar", Tensor::from_vector<float>({42}, Shape{})}};
  write_safetensors(dir + "/t.safetensors", in, {{"format", "pt"}});
  const auto out = read_safetensors(dir + "/t.safetensors");
  ASSERT_EQ(out.tensors.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    EXPECT_EQ(out.tensors[i].second.shape(), in[i].second.shape());
    EXPECT_EQ(out.tensors[i].second.dtype(), in[i].second.dtype());
    EXPECT_EQ(0, std::memcmp(out.tensors[i].second.raw_data(), in[i].second.raw_data(), in[i].second.nbytes()));
  }
  EXPECT_EQ(out.metadata.at("format"), "pt");
  const std::string bytes = read_file(dir + "/t.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header must be padded to 8-byte alignment";
}

namespace {
std::string header_file(const std::string& json, std::size_t data_bytes) {
  std::string out(8, '\0');
  const std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + std::string(data_bytes, '\0');
}
}  // namespace

TEST(Safetensors, RejectsMalformedFilesNamingFileAndProblem) {
  const std::string good = encode_safetensors({{"w", Tensor::ones({4, 4})}});
  const std::string src = "model.safetensors";
  expect_io_error([&] { decode_safetensors(good.substr(0, 5), src); }, {src, "truncated"});
  expect_io_error([&] { decode_safetensors(good.substr(0, good.size() - 3), src); }, {src, "'w'", "truncated"});
  std::string lying = good;
  lying[0] = static_cast<char>(0xff);
  lying[5] = 1;
  expect_io_error([&] { decode_safetensors(lying, src); }, {src, "header length", "past the end"});
  expect_io_error([&] { decode_safetensors(header_file("{\"w\": {\"dtype\": \"F32\", ", 0), src); }, {src, "header"});
  expect_io_error([&] { decode_safetensors(header_file(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16), src); },
                  {src, "'F64'"});
  expect_io_error([&] { decode_safetensors(header_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12), src); },
                  {src, "'w'", "needs 8"});
  expect_io_error([&] {
    decode_safetensors(header_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), src);
  }, {src, "'b'", "overlaps"});
  expect_io_error([&] { decode_safetensors(header_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12), src); },
                  {src, "4 bytes after the last tensor"});
  expect_io_error([&] { decode_safetensors(header_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), src); },
                  {src, "non-negative"});
  expect_io_error([&] { read_safetensors("/nonexistent/dir/x.safetensors"); }, {"/nonexistent/dir/x.safetensors"});
}

TEST(AtomicWrite, InjectedFailureKeepsOldFileAndRemovesTemp) {
  const std::string dir = fresh_dir("atomic_inject");
  const std::string path = dir + "/f.bin";
  write_file_atomic(path, "old contents");
  io::detail::g_inject_write_errno = ENOSPC;
  expect_io_error([&] { write_file_atomic(path, std::string(10000, 'x')); }, {path, "No space left on device"});
  EXPECT_EQ(read_file(path), "old contents");
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename(), "f.bin") << "left behind: " << e.path();
}

// A real full disk: a 64 KiB tmpfs. Needs mount privileges (root outside a restricted container).
TEST(AtomicWrite, FullTmpfsKeepsOldFileAndRemovesTemp) {
  const std::string dir = fresh_dir("atomic_tmpfs");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  struct Unmount {
    std::string d;
    ~Unmount() { ::umount(d.c_str()); }
  } unmount{dir};
  const std::string path = dir + "/f.bin";
  write_file_atomic(path, std::string(40000, 'a'));
  expect_io_error([&] { write_file_atomic(path, std::string(40000, 'b')); }, {path, "No space left on device"});
  EXPECT_EQ(read_file(path), std::string(40000, 'a'));
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename(), "f.bin") << "left behind: " << e.path();
  expect_io_error([&] { write_file_atomic(dir + "/no/such/dir/f", "x"); }, {dir + "/no/such/dir/f", "No such file"});
}
