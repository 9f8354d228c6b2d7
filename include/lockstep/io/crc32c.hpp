#pragma once
// CRC-32C (Castagnoli), the checksum TFRecord framing and our checkpoints use.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace lockstep::io {

/// CRC-32C of `n` bytes, continuing from `crc` (the value of a previous call; 0 to start).
/// Uses SSE4.2's crc32 instruction when the CPU has it, a slicing table otherwise; both agree.
std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n);
inline std::uint32_t crc32c(const void* data, std::size_t n) { return crc32c_extend(0, data, n); }
inline std::uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

/// The portable table-driven path, exposed so tests can check it against the hardware path.
std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n);

/// TFRecord's masked CRC: a CRC stored next to the data it covers is rotated and offset, because
/// the CRC of a string that itself contains CRCs is otherwise prone to cancel out.
inline std::uint32_t mask_crc32c(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline std::uint32_t unmask_crc32c(std::uint32_t masked) {
  const std::uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace lockstep::io
