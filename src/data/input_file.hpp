#pragma once
// A file read front to back, raw or gzip-compressed, with errors that name the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lockstep/core/shape.hpp"

namespace lockstep::data::detail {

class InputFile {
 public:
  /// Opens `path`; gzip is recognised by its magic bytes 1f 8b. `who` prefixes messages
  /// ("read_idx"). Throws IOError when the file is missing or unreadable.
  InputFile(const std::string& path, const char* who);
  /// Reads `bytes` (already in memory: a member of an archive) as if they were a raw file
  /// named `name`.
  InputFile(std::string bytes, const std::string& name, const char* who);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  bool gzip() const { return gz_ != nullptr; }
  /// Bytes on disk (compressed size for gzip).
  std::uint64_t disk_size() const { return disk_size_; }
  const std::string& path() const { return path_; }

  /// Reads up to n bytes; fewer only at the end of the data. Throws IOError on a read error
  /// or corrupt gzip data.
  std::size_t read(void* dst, std::size_t n);
  /// Reads exactly n bytes of `what` ("the header"); throws IOError "truncated" otherwise.
  void read_exact(void* dst, std::size_t n, const char* what);
  /// True when no byte is left.
  bool at_end();
  /// The most data bytes that can follow a header of `header_bytes`: what is left of a raw
  /// file, or the most a gzip file of this size can inflate to. Checking a header's promise
  /// against it rejects a corrupt header before anything is allocated.
  std::uint64_t max_data_bytes(std::uint64_t header_bytes) const;
  /// Throws IOError "truncated" unless `shape` of elements of `element_size` bytes fits in
  /// max_data_bytes(header_bytes); returns the byte count. Guards against overflow.
  std::uint64_t check_data_fits(const Shape& shape, std::size_t element_size, std::uint64_t header_bytes,
                                const char* what) const;
  /// Throws IOError unless every byte has been read: a header that promises less data than
  /// the file holds is as wrong as one that promises more, and dropping data would hide it.
  void expect_end(const std::string& what);
  /// "read_idx: 'path': " for messages.
  std::string prefix() const;

 private:
  std::string path_;
  const char* who_;
  std::FILE* file_ = nullptr;
  void* gz_ = nullptr;  // gzFile, kept opaque so that zlib stays a private dependency
  std::uint64_t disk_size_ = 0;
  bool in_memory_ = false;
  std::string memory_;
  std::size_t memory_pos_ = 0;
};

inline std::uint32_t load_be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

/// Reverses the byte order of each of n elements of `size` bytes, in place.
void byteswap_elements(void* data, std::size_t n, std::size_t size);

}  // namespace lockstep::data::detail
