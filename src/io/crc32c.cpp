#include "lockstep/io/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace lockstep::io {

namespace {
constexpr std::uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

// Slicing-by-8 tables: table[k][b] is the CRC of byte b followed by k zero bytes.
struct Tables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  Tables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
      for (std::size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  }
};
const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t extend_sse42(std::uint32_t crc, const unsigned char* p,
                                                               std::size_t n) {
  std::uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
bool has_sse42() {
  static const bool kHas = __builtin_cpu_supports("sse4.2");
  return kHas;
}
#endif
}  // namespace

std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n) {
  const auto& t = tables().t;
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint32_t lo;
    std::uint32_t hi;
    std::memcpy(&lo, p, 4);  // little-endian hosts only, as the rest of lockstep
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = t[0][(c ^ *p) & 0xff] ^ (c >> 8);
  return ~c;
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
#if defined(__x86_64__)
  if (has_sse42()) return extend_sse42(crc, static_cast<const unsigned char*>(data), n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

}  // namespace lockstep::io
