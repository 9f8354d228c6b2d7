#pragma once
// Zip archives held in memory: what a Keras 3 `.keras` file is (config.json, metadata.json and
// model.weights.h5, stored uncompressed). Reading takes stored and deflated entries; zip64,
// encryption, multi-disk archives and other methods are refused by name.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::io {

struct ZipEntry {
  std::string name;
  std::string bytes;
};

/// A zip archive's directory, checked whole when opened; an entry is inflated only when read, so
/// that a caller pays for the entries it needs. Opening throws IOError naming `source` and the
/// problem: not a zip (no end-of-central-directory record), truncated (a record or an entry's
/// data past the end), an unsupported feature, two entries with one name, entries whose bytes
/// overlap or lie outside the archive's data, or entries claiming more bytes than deflate can
/// make of the archive (uncompressed <= 1032 x compressed each, and the archive's size x 1032 in
/// all): a crafted archive cannot make the reader allocate more than a real one of its size.
/// `bytes` must outlive the archive.
class ZipArchive {
 public:
  ZipArchive(std::string_view bytes, std::string source);
  /// Entry names, in central-directory order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  /// The content of entry `name`, checked against its CRC-32 and sizes; IOError if there is none.
  std::string read(const std::string& name) const;
  /// The bytes entry `name` inflates to, as its directory records (checked when it is read).
  std::uint64_t size_of(const std::string& name) const;

 private:
  struct Member {
    std::string name;
    std::uint16_t method;
    std::uint32_t crc;
    std::uint32_t packed;
    std::uint32_t size;
    std::size_t local;    // offset of its local header
    std::size_t data_at;  // offset of its (packed) data
  };
  void read_directory();
  void check_layout(std::size_t cd_offset) const;
  const Member& member(const std::string& name) const;
  [[noreturn]] void fail(const std::string& what) const;

  std::string_view bytes_;
  std::string source_;
  std::vector<Member> members_;
};

/// Every entry of the archive whose whole content is `bytes`, in central-directory order, each
/// checked as ZipArchive opens and reads it.
std::vector<ZipEntry> decode_zip(std::string_view bytes, const std::string& source);

/// The bytes of a zip archive holding `entries`, stored (method 0, as Python's zipfile writes
/// Keras archives), with a fixed timestamp so that equal content gives equal bytes. ValueError for
/// an empty or duplicate name, or an entry of 4 GiB or more (zip64 is not written).
std::string encode_zip(const std::vector<ZipEntry>& entries);

/// The entry called `name`, or nullptr.
const ZipEntry* find_entry(const std::vector<ZipEntry>& entries, const std::string& name);

}  // namespace lockstep::io
