#include "data/input_file.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "lockstep/core/error.hpp"
#include "lockstep/core/shape.hpp"

namespace lockstep::data::detail {

InputFile::InputFile(const std::string& path, const char* who) : path_(path), who_(who) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw IOError(prefix() + "cannot open: " + std::strerror(errno));
  if (std::fseek(file_, 0, SEEK_END) == 0) {
    const long size = std::ftell(file_);
    if (size > 0) disk_size_ = static_cast<std::uint64_t>(size);
  }
  std::rewind(file_);
  unsigned char magic[2] = {0, 0};
  const std::size_t got = std::fread(magic, 1, 2, file_);
  std::rewind(file_);
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    // Hand the open file to zlib instead of reopening it by name: then the file we sniffed is
    // the file we read. The descriptor's offset is wherever stdio's buffering left it.
    const int fd = dup(fileno(file_));
    gzFile gz = fd >= 0 && lseek(fd, 0, SEEK_SET) == 0 ? gzdopen(fd, "rb") : nullptr;
    std::fclose(file_);
    file_ = nullptr;
    if (!gz) {
      if (fd >= 0) close(fd);
      throw IOError(prefix() + "cannot open as gzip");
    }
    gzbuffer(gz, 1 << 18);
    gz_ = gz;
  }
}

InputFile::InputFile(std::string bytes, const std::string& name, const char* who)
    : path_(name), who_(who), disk_size_(bytes.size()), in_memory_(true), memory_(std::move(bytes)) {}

InputFile::~InputFile() {
  if (file_) std::fclose(file_);
  if (gz_) gzclose(static_cast<gzFile>(gz_));
}

std::string InputFile::prefix() const { return std::string(who_) + ": '" + path_ + "': "; }

std::size_t InputFile::read(void* dst, std::size_t n) {
  auto* out = static_cast<unsigned char*>(dst);
  std::size_t total = 0;
  while (total < n) {
    // gzread counts in unsigned and answers in int, so large reads go in chunks.
    const std::size_t chunk = std::min<std::size_t>(n - total, std::size_t{1} << 30);
    std::size_t got = 0;
    if (in_memory_) {
      got = std::min(chunk, memory_.size() - memory_pos_);
      std::memcpy(out + total, memory_.data() + memory_pos_, got);
      memory_pos_ += got;
    } else if (gz_) {
      const int r = gzread(static_cast<gzFile>(gz_), out + total, static_cast<unsigned>(chunk));
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(static_cast<gzFile>(gz_), &code);
        throw IOError(prefix() + "corrupt gzip data: " + (msg ? msg : "unknown zlib error"));
      }
      got = static_cast<std::size_t>(r);
    } else {
      got = std::fread(out + total, 1, chunk, file_);
      if (got < chunk && std::ferror(file_)) throw IOError(prefix() + "read error: " + std::strerror(errno));
    }
    total += got;
    if (got < chunk) break;
  }
  return total;
}

void InputFile::read_exact(void* dst, std::size_t n, const char* what) {
  const std::size_t got = read(dst, n);
  if (got != n) {
    throw IOError(prefix() + "truncated file: " + what + " needs " + std::to_string(n) + " bytes but only " +
                  std::to_string(got) + " are left");
  }
}

bool InputFile::at_end() {
  unsigned char byte;
  return read(&byte, 1) == 0;
}

std::uint64_t InputFile::max_data_bytes(std::uint64_t header_bytes) const {
  // Deflate cannot compress better than about 1032:1.
  constexpr std::uint64_t kMaxDeflateRatio = 1032;
  if (gz_) return disk_size_ * kMaxDeflateRatio;
  return disk_size_ > header_bytes ? disk_size_ - header_bytes : 0;
}

std::uint64_t InputFile::check_data_fits(const Shape& shape, std::size_t element_size, std::uint64_t header_bytes,
                                         const char* what) const {
  const std::uint64_t available = max_data_bytes(header_bytes);
  const auto& dims = shape.dims();
  // Even an empty array must have a shape whose other dimensions multiply without overflow.
  std::uint64_t nonzero = 1;
  for (auto d : dims) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && nonzero > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / ud) {
      throw IOError(prefix() + "corrupt header: the dimensions " + shape.str() + " of " + what + " overflow");
    }
    if (ud != 0) nonzero *= ud;
  }
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;
  // Multiplying dimension by dimension against the bound also guards against overflow.
  std::uint64_t needed = element_size;
  for (auto d : dims) {
    const auto ud = static_cast<std::uint64_t>(d);
    needed = needed > available / ud ? available + 1 : needed * ud;
  }
  if (needed > available) {
    throw IOError(prefix() + "truncated file: " + what + " of shape " + shape.str() +
                  " needs more data than the file's " + std::to_string(disk_size_) + " bytes" +
                  (gz_ ? " of gzip can hold" : " hold after the header"));
  }
  return needed;
}

void InputFile::expect_end(const std::string& what) {
  if (!at_end()) throw IOError(prefix() + "trailing data after " + what + "; is the header's shape wrong?");
}

void byteswap_elements(void* data, std::size_t n, std::size_t size) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i, p += size) std::reverse(p, p + size);
}

}  // namespace lockstep::data::detail
