#include <cstring>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "data/test_util.hpp"
#include "lockstep/data/npy.hpp"

using namespace lockstep;
using lockstep::data::read_npy;
using lockstep::data::write_npy;
using lockstep::test::expect_io_error;
using lockstep::test::read_bytes;
using lockstep::test::TempDir;
using lockstep::test::write_bytes;

namespace {

std::string fixture(const std::string& name) { return std::string(LOCKSTEP_SOURCE_DIR) + "/tests/data/fixtures/" + name; }

bool numpy_available() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

}  // namespace

// The fixtures come from tests/data/fixtures/make_npy_fixtures.py; the values here restate it.
TEST(DataNpy, ReadsFilesWrittenByNumpy) {
  for (const char* name : {"f4_2x3.npy", "f4_2x3_v2.npy"}) {
    const Tensor t = read_npy(fixture(name));
    EXPECT_EQ(t.shape(), (Shape{2, 3})) << name;
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f})) << name;
  }
  EXPECT_EQ(read_npy(fixture("i8_3.npy")).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{-3, 0, std::int64_t{1} << 40}));
  const Tensor u8 = read_npy(fixture("u1_4x2.npy"));
  EXPECT_EQ(u8.shape(), (Shape{4, 2}));
  EXPECT_EQ(u8.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(read_npy(fixture("f8_3.npy")).to_vector<float>(), (std::vector<float>{1.5f, -2.25f, 1e-3f}));
  EXPECT_EQ(read_npy(fixture("b1_3.npy")).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 0, 1}));
  EXPECT_EQ(read_npy(fixture("f4_big_endian_3.npy")).to_vector<float>(), (std::vector<float>{0.25f, 1.25f, 2.25f}));
  const Tensor scalar = read_npy(fixture("f4_scalar.npy"));
  EXPECT_EQ(scalar.rank(), 0u);
  EXPECT_EQ(scalar.item(), 7.5f);
  EXPECT_EQ(read_npy(fixture("f4_0x3.npy")).shape(), (Shape{0, 3}));
}

TEST(DataNpy, FortranOrderIsTransposedToCOrder) {
  const Tensor t = read_npy(fixture("i4_fortran_2x3x4.npy"));
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  std::vector<std::int32_t> expected(24);
  for (int i = 0; i < 24; ++i) expected[i] = i;  // np.arange(24).reshape(2, 3, 4), in C order
  EXPECT_EQ(t.to_vector<std::int32_t>(), expected);
}

TEST(DataNpy, RoundTripsEveryDtype) {
  TempDir dir;
  const std::vector<Tensor> tensors = {
      Tensor::from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {3, 2}),
      Tensor::from_vector<std::int32_t>({-7, 8}, {2}),
      Tensor::from_vector<std::int64_t>({std::int64_t{1} << 50, -1, 0, 5}, {1, 2, 2}),
      Tensor::from_vector<std::uint8_t>({255, 0, 9}, {3}),
      Tensor::scalar(2.5f),
      Tensor::zeros({0, 4}),
  };
  for (const auto& t : tensors) {
    write_npy(dir.file("t.npy"), t);
    const Tensor back = read_npy(dir.file("t.npy"));
    EXPECT_EQ(back.shape(), t.shape());
    ASSERT_EQ(back.dtype(), t.dtype());
    EXPECT_EQ(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()), 0);
    EXPECT_EQ(read_bytes(dir.file("t.npy")).size() % 64, t.nbytes() % 64);  // data starts 64-byte aligned
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("t.npy.partial")));
}

TEST(DataNpy, WritesVersion2WhenTheHeaderNeedsIt) {
  TempDir dir;
  const Tensor t = Tensor::zeros(Shape(std::vector<std::int64_t>(30000, 1)));  // header > 64 KiB
  write_npy(dir.file("big.npy"), t);
  EXPECT_EQ(read_bytes(dir.file("big.npy"))[6], '\x02');
  EXPECT_EQ(read_npy(dir.file("big.npy")).shape(), t.shape());
}

TEST(DataNpy, NumpyReadsWhatWeWrite) {
  if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy not found";
  TempDir dir;
  write_npy(dir.file("a.npy"), Tensor::from_vector<float>({1, 2, 3, 4.5f, 5, 6}, {2, 3}));
  write_npy(dir.file("b.npy"), Tensor::from_vector<std::uint8_t>({3, 1, 2}, {3}));
  const std::string cmd = "/usr/bin/python3 -c \"import numpy as np, sys; a = np.load(sys.argv[1]); b = np.load(sys.argv[2]); "
                          "sys.exit(0 if a.dtype == np.float32 and a.shape == (2, 3) and a[1, 0] == 4.5 and "
                          "b.dtype == np.uint8 and list(b) == [3, 1, 2] else 1)\" " +
                          dir.file("a.npy") + " " + dir.file("b.npy");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

TEST(DataNpy, ErrorsNameTheFile) {
  TempDir dir;
  expect_io_error([&] { read_npy(dir.file("missing.npy")); }, {dir.file("missing.npy"), "cannot open"});
  write_bytes(dir.file("magic.npy"), "PK\x03\x04 this is a zip");
  expect_io_error([&] { read_npy(dir.file("magic.npy")); }, {dir.file("magic.npy"), "magic"});
  expect_io_error([&] { read_npy(fixture("c8_2.npy")); }, {fixture("c8_2.npy"), "unsupported", "<c8"});

  const std::string good = read_bytes(fixture("f4_2x3.npy"));
  write_bytes(dir.file("short.npy"), good.substr(0, good.size() - 3));
  expect_io_error([&] { read_npy(dir.file("short.npy")); }, {dir.file("short.npy"), "truncated"});
  write_bytes(dir.file("header.npy"), good.substr(0, 40));
  expect_io_error([&] { read_npy(dir.file("header.npy")); }, {dir.file("header.npy"), "truncated"});
  write_bytes(dir.file("long.npy"), good + "junk");
  expect_io_error([&] { read_npy(dir.file("long.npy")); }, {dir.file("long.npy"), "trailing"});

  auto with_header = [](const std::string& dict) {
    std::string h = dict + "\n";
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h;
  };
  for (const char* dict : {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
                           "{'descr': '<f4', 'shape': (2,), }", "{'descr': [('a', '<f4')], 'fortran_order': False, "
                           "'shape': (1,), }", "not a dict"}) {
    write_bytes(dir.file("parse.npy"), with_header(dict));
    expect_io_error([&] { read_npy(dir.file("parse.npy")); }, {dir.file("parse.npy"), "header"});
  }
  // One line, the reason first (the header's own newline once put the reason on a second line).
  write_bytes(dir.file("parse.npy"), with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }"));
  try {
    read_npy(dir.file("parse.npy"));
    ADD_FAILURE() << "no IOError";
  } catch (const IOError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_LT(m.find("cannot parse the .npy header: "), m.find("(header: \"{'descr'")) << m;
    EXPECT_NE(m.find("), }\\n\")"), std::string::npos) << m;
  }
  write_bytes(dir.file("version.npy"), std::string("\x93NUMPY\x07\x00", 8) + "xxxx");
  expect_io_error([&] { read_npy(dir.file("version.npy")); }, {dir.file("version.npy"), "version 7.0"});
}

TEST(DataNpy, WriteRejectsBfloat16AndUnwritablePaths) {
  TempDir dir;
  EXPECT_THROW(write_npy(dir.file("x.npy"), Tensor::zeros({2}, DType::kBF16)), ValueError);
  expect_io_error([&] { write_npy(dir.file("no/dir/x.npy"), Tensor::zeros({2})); }, {dir.file("no/dir/x.npy")});
}

TEST(DataNpy, CorruptedFilesNeverCrash) {
  TempDir dir;
  const std::string good = read_bytes(fixture("i4_fortran_2x3x4.npy"));
  std::mt19937 rng(99);
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = good;
    for (int f = 0; f < 1 + trial % 3; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (trial % 4 == 0) bytes.resize(rng() % bytes.size());
    write_bytes(dir.file("fuzz.npy"), bytes);
    try {
      read_npy(dir.file("fuzz.npy"));
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(dir.file("fuzz.npy")), std::string::npos) << e.what();
    }
  }
  write_bytes(dir.file("overflow.npy"), [] {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, 0), }\n";
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h;
  }());
  expect_io_error([&] { read_npy(dir.file("overflow.npy")); }, {dir.file("overflow.npy"), "overflow"});
}
