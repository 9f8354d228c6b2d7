// Zip archives and HDF5 files held in memory (the two containers of Keras files): round trips,
// Python's zipfile layout, and every kind of broken input named.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <fstream>

#include "io/io_test_util.hpp"
#include "lockstep/io/atomic_file.hpp"
#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/io/zip_archive.hpp"

namespace lockstep::io {
namespace {

std::vector<ZipEntry> sample_entries() {
  std::string big(100000, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 % 251);
  return {{"metadata.json", "{\"keras_version\": \"3\"}"}, {"config.json", "{}"}, {"model.weights.h5", big},
          {"empty", ""}};
}

TEST(Zip, RoundTripKeepsNamesOrderAndBytes) {
  const auto entries = sample_entries();
  const std::string zip = encode_zip(entries);
  EXPECT_EQ(zip.substr(0, 4), std::string("PK\x03\x04", 4));
  const auto back = decode_zip(zip, "a.keras");
  ASSERT_EQ(back.size(), entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(back[i].name, entries[i].name);
    EXPECT_EQ(back[i].bytes, entries[i].bytes);
  }
  EXPECT_EQ(encode_zip(entries), zip) << "equal content must give equal bytes";
  ASSERT_NE(find_entry(back, "config.json"), nullptr);
  EXPECT_EQ(find_entry(back, "nope"), nullptr);
}

// A deflated entry, as `zip` or Python's ZIP_DEFLATED writes it: local header, raw deflate
// stream, central directory, end record.
std::string deflated_zip(const std::string& name, const std::string& content) {
  std::string packed(compressBound(content.size()) + 64, '\0');
  z_stream s{};
  deflateInit2(&s, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(content.data()));
  s.avail_in = static_cast<uInt>(content.size());
  s.next_out = reinterpret_cast<Bytef*>(packed.data());
  s.avail_out = static_cast<uInt>(packed.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  packed.resize(s.total_out);
  deflateEnd(&s);
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(content.data()), static_cast<uInt>(content.size())));
  std::string zip = encode_zip({{name, content}});
  // Patch the stored archive into a deflated one: method 8, compressed size, data.
  std::string out;
  const auto put16 = [](std::string& o, std::uint32_t v) { o += static_cast<char>(v & 0xff), o += static_cast<char>(v >> 8 & 0xff); };
  const auto put32 = [&](std::string& o, std::uint32_t v) { put16(o, v & 0xffff), put16(o, v >> 16); };
  const auto header = [&](std::string& o, bool central, std::uint32_t offset) {
    put32(o, central ? 0x02014b50 : 0x04034b50);
    if (central) put16(o, 20);
    put16(o, 20), put16(o, 0), put16(o, 8), put16(o, 0), put16(o, 0x21);
    put32(o, crc), put32(o, static_cast<std::uint32_t>(packed.size())), put32(o, static_cast<std::uint32_t>(content.size()));
    put16(o, static_cast<std::uint32_t>(name.size())), put16(o, 0);
    if (central) put16(o, 0), put16(o, 0), put16(o, 0), put32(o, 0), put32(o, offset);
    o += name;
  };
  header(out, false, 0);
  out += packed;
  const auto cd = static_cast<std::uint32_t>(out.size());
  std::string dir;
  header(dir, true, 0);
  out += dir;
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0), put16(out, 1), put16(out, 1);
  put32(out, static_cast<std::uint32_t>(dir.size())), put32(out, cd), put16(out, 0);
  (void)zip;
  return out;
}

TEST(Zip, ReadsDeflatedEntries) {
  const std::string text(50000, 'k');
  const auto back = decode_zip(deflated_zip("config.json", text), "d.keras");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].bytes, text);
}

TEST(Zip, BrokenArchivesAreNamed) {
  const std::string zip = encode_zip(sample_entries());
  expect_io_error([] { decode_zip("", "e.keras"); }, {"e.keras", "not a zip archive"});
  expect_io_error([] { decode_zip(std::string(1000, 'x'), "x.keras"); }, {"x.keras", "not a zip archive"});
  // Cut anywhere: the end record is gone.
  for (const std::size_t keep : {zip.size() - 1, zip.size() / 2, std::size_t{30}})
    expect_io_error([&] { decode_zip(zip.substr(0, keep), "t.keras"); }, {"t.keras", "truncated"});
  // A flipped data byte fails the CRC.
  std::string bad = zip;
  bad[bad.find("keras_version") + 2] ^= 1;
  expect_io_error([&] { decode_zip(bad, "c.keras"); }, {"c.keras", "metadata.json", "CRC-32"});
  // Entries cut out of the middle: the directory points past the data.
  std::string cut = zip.substr(0, 200) + zip.substr(zip.size() - 300);
  expect_io_error([&] { decode_zip(cut, "m.keras"); }, {"m.keras"});
  // Deflate data that does not inflate to its recorded size.
  std::string d = deflated_zip("a", std::string(5000, 'q'));
  d[40] ^= 0x55;
  expect_io_error([&] { decode_zip(d, "z.keras"); }, {"z.keras", "entry 'a'"});
  EXPECT_THROW(encode_zip({{"a", "1"}, {"a", "2"}}), ValueError);
}

// Bytes flipped or cut anywhere: the archive reads back exactly, or an IOError names it.
TEST(Zip, CorruptBytesAreNamedNeverMisread) {
  const auto entries = sample_entries();
  const std::string good = encode_zip(entries);
  std::uint64_t state = 99;
  const auto next = [&](std::uint64_t n) { return ((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33) % n; };
  for (int i = 0; i < 500; ++i) {
    std::string b = good;
    if (i % 2) b = b.substr(0, next(b.size()));
    else b[next(b.size())] ^= static_cast<char>(1 << (i % 8));
    try {
      const auto back = decode_zip(b, "fuzz.keras");
      // Only bytes no reader looks at (a version field, the time) may change unnoticed.
      ASSERT_EQ(back.size(), entries.size()) << i;
      for (std::size_t k = 0; k < entries.size(); ++k) EXPECT_EQ(back[k].bytes, entries[k].bytes) << i;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.keras"), std::string::npos) << e.what();
    }
  }
}

H5Content sample_h5() {
  H5Content c;
  c.groups.push_back({"layers/dense/vars", {{"name", "dense"}}});
  c.groups.push_back({"layers/dropout/vars", {{"name", "dropout"}}});  // an empty group
  c.groups.push_back({"vars", {{"name", "sequential"}}});
  c.datasets.push_back({"layers/dense/vars/0", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3})});
  c.datasets.push_back({"layers/dense/vars/1", Tensor::from_vector(std::vector<float>{-1.5f, 0, 1e-30f}, Shape{3})});
  c.datasets.push_back({"optimizer/vars/0", Tensor::from_vector(std::vector<std::int64_t>{7}, Shape{})});
  return c;
}

TEST(Hdf5, RoundTripKeepsGroupsAttributesAndValues) {
  const H5Content c = sample_h5();
  const std::string bytes = encode_hdf5(c);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89HDF\r\n\x1a\n", 8));
  const H5Content back = decode_hdf5(bytes, "w.h5", {.attributes = true});
  for (const auto& g : c.groups) {
    const H5Group* b = back.find_group(g.path);
    ASSERT_NE(b, nullptr) << g.path;
    EXPECT_EQ(b->attributes, g.attributes) << g.path;
  }
  ASSERT_NE(back.find_group("layers"), nullptr) << "parents are made";
  for (const auto& d : c.datasets) {
    const Tensor* t = back.find_dataset(d.path);
    ASSERT_NE(t, nullptr) << d.path;
    EXPECT_EQ(t->shape(), d.value.shape());
    EXPECT_EQ(t->dtype(), d.value.dtype());
    EXPECT_EQ(std::memcmp(t->raw_data(), d.value.raw_data(), d.value.nbytes()), 0) << d.path;
  }
  EXPECT_EQ(back.datasets.size(), c.datasets.size());
}

TEST(Hdf5, BrokenFilesAreNamed) {
  const std::string bytes = encode_hdf5(sample_h5());
  expect_io_error([] { decode_hdf5("PK\x03\x04 not hdf5", "n.h5"); }, {"n.h5", "not an HDF5 file"});
  for (const std::size_t keep : {bytes.size() - 1, bytes.size() / 2, std::size_t{100}})
    expect_io_error([&] { decode_hdf5(bytes.substr(0, keep), "t.h5"); }, {"t.h5"});
  H5Content f16;
  f16.datasets.push_back({"x", Tensor::zeros(Shape{2}, DType::kF16)});
  EXPECT_THROW(encode_hdf5(f16), ValueError);
  H5Content twice = sample_h5();
  twice.datasets.push_back(twice.datasets.front());
  EXPECT_THROW(encode_hdf5(twice), ValueError);
}

// Bytes flipped, zeroed or cut anywhere: an IOError or a file that reads, never a crash or a hang
// (run under the sanitizers too). Attributes stay unread, as loaders read files: libhdf5 follows
// a corrupt variable-length string out of bounds (this test found it with attributes on).
TEST(Hdf5, CorruptBytesNeverCrash) {
  H5Content c = sample_h5();
  c.datasets.push_back({"layers/conv2d/vars/0", Tensor::ones(Shape{3, 3, 2, 4})});
  const std::string good = encode_hdf5(c);
  std::uint64_t state = 12345;
  const auto next = [&](std::uint64_t n) { return ((state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33) % n; };
  int errors = 0;
  for (int i = 0; i < 400; ++i) {
    std::string b = good;
    switch (i % 3) {
      case 0:
        for (int k = 0; k < 1 + i % 4; ++k) b[next(b.size())] ^= static_cast<char>(1 << (i % 8));
        break;
      case 1: b = b.substr(0, next(b.size())); break;
      default: {
        const auto at = next(b.size());
        for (std::size_t k = at; k < std::min(b.size(), at + 64); ++k) b[k] = 0;
      }
    }
    try {
      (void)decode_hdf5(b, "fuzz.h5");
    } catch (const IOError& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("fuzz.h5"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 100) << "most corruptions of the metadata are noticed";
}

}  // namespace
}  // namespace lockstep::io
