// Zip archives that ask for more than their size allows (issue 41, item 4): entries over one
// another's bytes, entries outside the archive's data, and the entries a reader does not need.
// Each is refused with an IOError naming the file, the entries and the sizes, quickly and in
// bounded memory.
#include <gtest/gtest.h>


#include "io/io_test_util.hpp"
#include "io/zip_test_util.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "common/cpu_time.hpp"

namespace lockstep::io {
namespace {

using ziptest::with_aliases;

// 40 directory entries over one deflated 100 MB member: 4 GB asked of a ~100 KB file.
TEST(ZipBomb, OverlappingEntriesAreRefusedBeforeInflating) {
  const std::string bomb = with_aliases(ziptest::deflated_zeros_npz(25'000'000), 40);
  ASSERT_LT(bomb.size(), 1'000'000u);
  EXPECT_LT(test::thread_cpu_seconds_of([&] {
    expect_io_error([&] { ZipArchive(bomb, "bomb.keras"); }, {"bomb.keras", "'x.npy'", "'alias0.npy'", "overlap"});
    expect_io_error([&] { decode_zip(bomb, "bomb.keras"); }, {"bomb.keras", "overlap"});
  }), 2.0);
  // And in a child that may not map 1 GB (4 GB would be inflated without the check).
  const std::string got = ziptest::load_in_bounded_child([&] { decode_zip(bomb, "bomb.keras"); }, 1ull << 30);
  EXPECT_NE(got.find("error: zip archive 'bomb.keras'"), std::string::npos) << got;
}

TEST(ZipBomb, OneEntryIsInflatedOnlyWhenRead) {
  const std::string zip = ziptest::deflated_zeros_npz(1000);
  const ZipArchive archive(zip, "one.keras");
  ASSERT_EQ(archive.names(), std::vector<std::string>{"x.npy"});
  EXPECT_EQ(archive.size_of("x.npy"), 4000u + 128u);
  EXPECT_EQ(archive.read("x.npy").size(), 4000u + 128u);
  expect_io_error([&] { archive.read("y.npy"); }, {"one.keras", "no entry 'y.npy'"});
}

TEST(ZipBomb, EntriesOutsideTheDataOrClaimingTooMuchAreRefused) {
  const std::string good = encode_zip({{"a", std::string(100, 'a')}, {"b", std::string(100, 'b')}});
  // The central directory starts after both entries; point "b"'s local header into it.
  const std::size_t end = good.size() - 22;
  const std::uint32_t cd = ziptest::get32(good, end + 16);
  std::string into_directory = good;
  const std::size_t b_central = cd + 46 + 1;
  ziptest::set_le(into_directory, b_central + 42, cd, 4);
  expect_io_error([&] { ZipArchive(into_directory, "dir.keras"); }, {"dir.keras", "entry 'b'"});
  // "b" claims to be deflated to 1032 x + 1025 its packed size: more than deflate can make.
  std::string ratio = good;
  ziptest::set_le(ratio, b_central + 10, 8, 2);
  ziptest::set_le(ratio, b_central + 24, 100 * 1032 + 1025, 4);
  expect_io_error([&] { ZipArchive(ratio, "ratio.keras"); }, {"ratio.keras", "entry 'b'", "104225", "100"});
  // Aliases of a stored entry overlap too.
  expect_io_error([&] { ZipArchive(with_aliases(good, 1, 1), "alias.keras"); }, {"alias.keras", "'b'", "overlap"});
}

}  // namespace
}  // namespace lockstep::io
