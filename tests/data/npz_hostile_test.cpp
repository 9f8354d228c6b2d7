// Hostile .npz files (issue 41, items 4 and 10): members over one another's bytes (a small file
// asking for gigabytes), and paths that are not files. Each is an IOError naming the path and
// the problem, quickly and in bounded memory.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>

#include "io/zip_test_util.hpp"
#include "lockstep/data/npz.hpp"
#include "lockstep/datasets/npz_dataset.hpp"
#include "test_util.hpp"
#include "common/cpu_time.hpp"

namespace lockstep {
namespace {

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(NpzHostile, OverlappingMembersAreRefusedBeforeInflating) {
  test::TempDir dir;
  // One deflated 100 MB member listed 41 times: ~100 KB asking for 4 GB.
  const std::string good = ziptest::deflated_zeros_npz(25'000'000);
  write_bytes(dir.file("good.npz"), good);
  EXPECT_EQ(data::read_npz(dir.file("good.npz")).at("x").shape(), (Shape{25'000'000}));
  write_bytes(dir.file("bomb.npz"), ziptest::with_aliases(good, 40));
  EXPECT_LT(test::thread_cpu_seconds_of([&] {
    test::expect_io_error([&] { data::read_npz(dir.file("bomb.npz")); }, {"bomb.npz", "'x.npy'", "'alias", "overlap"});
  }), 2.0);
  const std::string got =
      ziptest::load_in_bounded_child([&] { datasets::load_npz(dir.file("bomb.npz")); }, 1ull << 30);
  EXPECT_NE(got.find("error: read_npz: '" + dir.file("bomb.npz")), std::string::npos) << got;
}

TEST(NpzHostile, MemberClaimingMoreThanDeflateCanMakeIsRefused) {
  test::TempDir dir;
  std::string zip = ziptest::deflated_zeros_npz(1000);
  const std::size_t cd = ziptest::get32(zip, zip.size() - 22 + 16);
  const std::uint32_t packed = ziptest::get32(zip, cd + 20);
  ziptest::set_le(zip, cd + 24, packed * 1032 + 1025, 4);
  write_bytes(dir.file("ratio.npz"), zip);
  test::expect_io_error([&] { data::read_npz(dir.file("ratio.npz")); },
                        {"ratio.npz", "member 'x.npy' claims " + std::to_string(packed * 1032 + 1025)});
}

TEST(NpzHostile, LoadNpzInflatesOnlyItsFourArrays) {
  test::TempDir dir;
  const std::map<std::string, Tensor> arrays = {{"x_train", Tensor::zeros({2, 3}, DType::kF32)},
                                                {"y_train", Tensor::from_vector<std::int64_t>({0, 1}, {2})},
                                                {"x_test", Tensor::zeros({1, 3}, DType::kF32)},
                                                {"y_test", Tensor::from_vector<std::int64_t>({1}, {1})},
                                                {"zz_extra", Tensor::zeros({64}, DType::kF32)}};
  data::write_npz(dir.file("d.npz"), arrays);
  // Corrupt the extra member's data (its last bytes, stored): its CRC no longer matches.
  std::string bytes = [&] {
    std::ifstream in(dir.file("d.npz"), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::size_t cd = ziptest::get32(bytes, bytes.size() - 22 + 16);
  bytes[cd - 1] ^= 0x55;
  write_bytes(dir.file("d.npz"), bytes);
  test::expect_io_error([&] { data::read_npz(dir.file("d.npz")); }, {"d.npz", "zz_extra.npy", "CRC"});
  EXPECT_EQ(datasets::load_npz(dir.file("d.npz")).train.x.shape(), (Shape{2, 3}));
}

TEST(NpzHostile, ADirectoryOrADeviceIsNamedNotRead) {
  test::TempDir dir;
  test::expect_io_error([&] { datasets::load_npz(dir.path()); }, {dir.path(), "is a directory"});
  EXPECT_LT(test::thread_cpu_seconds_of([&] {
    test::expect_io_error([&] { data::read_npz("/dev/zero"); }, {"/dev/zero", "not a regular file"});
  }), 2.0);
}

}  // namespace
}  // namespace lockstep
