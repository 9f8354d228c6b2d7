// HDF5 files built to attack the reader (issue 41, items 1, 4 and 8): data kept outside the file,
// memory asked for beyond what the file holds, and structures that take quadratic time. Each
// ends in an IOError naming the file and the problem, in bounded time, before large allocations.
#include <hdf5.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>

#include "io_test_util.hpp"
#include "lockstep/io/hdf5_file.hpp"

namespace lockstep::io {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// `prefix` followed by `i` (built by appending: GCC 12 misreports `"literal" + std::string`).
std::string numbered(std::string prefix, int i) {
  prefix += std::to_string(i);
  return prefix;
}

// An in-memory HDF5 file that `build` fills through libhdf5 itself; returns its bytes.
std::string build_file(const std::function<void(hid_t)>& build) {
  static int counter = 0;
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 16, 0);
  const std::string name = numbered("hostile-test-", counter++) + ".h5";
  const hid_t file = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  EXPECT_GE(file, 0);
  build(file);
  H5Fflush(file, H5F_SCOPE_GLOBAL);
  const ssize_t size = H5Fget_file_image(file, nullptr, 0);
  std::string bytes(static_cast<std::size_t>(size), '\0');
  H5Fget_file_image(file, bytes.data(), bytes.size());
  H5Fclose(file);
  H5Pclose(fapl);
  return bytes;
}

// A float32 dataset `name` of `dims` under `where`, created with `dcpl`; written when `data` is given.
void add_dataset(hid_t where, const char* name, std::vector<hsize_t> dims, hid_t dcpl = H5P_DEFAULT,
                 const float* data = nullptr) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(where, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0) << name;
  if (data != nullptr) {
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
  }
  H5Dclose(d);
  H5Sclose(space);
}

// Expects an IOError naming `source` and every needle, within `max_s` seconds; returns its message.
std::string expect_refused(const std::string& bytes, const std::string& source, std::initializer_list<std::string> needles,
                           double max_s = 10) {
  const auto t0 = Clock::now();
  std::string message;
  try {
    (void)decode_hdf5(bytes, source);
    ADD_FAILURE() << source << ": no IOError";
  } catch (const IOError& e) {
    message = e.what();
  }
  EXPECT_LT(seconds_since(t0), max_s) << source;
  EXPECT_NE(message.find(source), std::string::npos) << message;
  for (const auto& n : needles) EXPECT_NE(message.find(n), std::string::npos) << message << "\nmissing: " << n;
  return message;
}

// External raw storage (H5Pset_external) pointing at `target`: 16 floats from its start.
std::string external_storage_file(const std::string& target) {
  return build_file([&](hid_t file) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, target.c_str(), 0, 16 * sizeof(float));
    const hid_t g = H5Gcreate2(file, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    add_dataset(g, "bias", {16}, dcpl);
    H5Gclose(g);
    H5Pclose(dcpl);
  });
}

TEST(Hdf5Hostile, ExternalStorageIsRefusedBeforeAnyRead) {
  const std::string dir = fresh_dir("h5_external");
  const std::string secret = dir + "/secret.txt";
  const std::string marker = "TOP-SECRET-MARKER-0123456789abcdefghijklmnopqrstuvwxyz";
  std::ofstream(secret) << marker << marker;
  const std::string msg = expect_refused(external_storage_file(secret), "ext.keras", {"layers/bias", "external"});
  EXPECT_EQ(msg.find("TOP-SECRET"), std::string::npos) << "the target's bytes never appear";
  // A FIFO would block the open forever; a missing file would read as zeros.
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(external_storage_file(fifo), "fifo.h5", {"layers/bias", "external"}, 5);
  expect_refused(external_storage_file(dir + "/missing"), "missing.h5", {"layers/bias", "external"});
}

TEST(Hdf5Hostile, VirtualDatasetIsRefused) {
  const std::string dir = fresh_dir("h5_virtual");
  const std::string source_file = dir + "/source.h5";
  const std::vector<float> secret(8, 42.0f);
  {
    const hid_t f = H5Fcreate(source_file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    add_dataset(f, "secret", {8}, H5P_DEFAULT, secret.data());
    H5Fclose(f);
  }
  const std::string bytes = build_file([&](hid_t file) {
    const hsize_t n = 8;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_virtual(dcpl, space, source_file.c_str(), "secret", space), 0);
    add_dataset(file, "kernel", {8}, dcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  expect_refused(bytes, "vds.h5", {"kernel", "virtual"});
}

TEST(Hdf5Hostile, ChunksNeverWrittenAreRefusedNamingTheSizes) {
  const auto chunked = [](std::vector<hsize_t> dims) {
    return build_file([&](hid_t file) {
      const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      std::vector<hsize_t> chunk(dims.size(), 64);
      H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
      add_dataset(file, "fill", dims, dcpl);
      H5Pclose(dcpl);
    });
  };
  // 91 GB of fill values from a few KB: refused from the shape alone.
  expect_refused(chunked({1u << 20, 1u << 15}), "fill91g.h5", {"'fill'", "[1048576, 32768]", "more data than a file of"}, 5);
  // Within the shape's bound, refused by what is stored: 1 MiB claimed, nothing written.
  expect_refused(chunked({512, 512}), "fill1m.h5", {"'fill'", "claims 1048576 bytes but stores 0"}, 5);
}

TEST(Hdf5Hostile, CompressedChunksOfARealFileLoad) {
  const std::vector<float> zeros(1u << 20, 0.0f);  // 4 MB of zeros: deflate's best ratio
  const std::string bytes = build_file([&](hid_t file) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk = 1u << 18;
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_deflate(dcpl, 9);
    add_dataset(file, "zeros", {zeros.size()}, dcpl, zeros.data());
    H5Pclose(dcpl);
  });
  const H5Content c = decode_hdf5(bytes, "deflate.h5");
  ASSERT_NE(c.find_dataset("zeros"), nullptr);
  EXPECT_EQ(c.find_dataset("zeros")->numel(), static_cast<std::int64_t>(zeros.size()));
}

TEST(Hdf5Hostile, HardLinksToOneObjectAreRefused) {
  const std::vector<float> w(1024, 1.0f);
  const std::string many = build_file([&](hid_t file) {
    add_dataset(file, "w", {w.size()}, H5P_DEFAULT, w.data());
    for (int i = 0; i < 100; ++i)
      H5Lcreate_hard(file, "w", file, numbered("copy", i).c_str(), H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_refused(many, "links.h5", {"'copy1'", "second path", "'copy0'"});
  // A group linked into itself: a cycle, ended at its first repeat.
  const std::string cycle = build_file([&](hid_t file) {
    const hid_t g = H5Gcreate2(file, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_hard(g, ".", g, "self", H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
  });
  expect_refused(cycle, "cycle.h5", {"'g/self'", "second path", "to 'g'"});
}

// `depth` groups each inside the last (created relative to the open parent: linear).
std::string nested_groups(int depth) {
  return build_file([&](hid_t file) {
    hid_t parent = H5Gopen2(file, "/", H5P_DEFAULT);
    for (int i = 0; i < depth; ++i) {
      const hid_t g = H5Gcreate2(parent, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Gclose(parent);
      parent = g;
    }
    H5Gclose(parent);
  });
}

TEST(Hdf5Hostile, DeepNestingIsBoundedAndWideGroupsReadInLinearTime) {
  expect_refused(nested_groups(6000), "deep.h5", {"nest deeper than 64"}, 5);
  EXPECT_EQ(decode_hdf5(nested_groups(60), "ok.h5").groups.size(), 60u);
  const std::string wide = build_file([](hid_t file) {
    for (int i = 0; i < 6000; ++i) {
      const hid_t g = H5Gcreate2(file, numbered("g", i).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      H5Gclose(g);
    }
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(decode_hdf5(wide, "wide.h5").groups.size(), 6000u);
  EXPECT_LT(seconds_since(t0), 10) << "6,000 groups";
  const std::string long_name = build_file([](hid_t file) {
    const hid_t g = H5Gcreate2(file, std::string(5000, 'n').c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
  });
  expect_refused(long_name, "long.h5", {"longer than 4096 characters"});
}

}  // namespace
}  // namespace lockstep::io
