#pragma once
// Storage types of the 16-bit floating dtypes. Arithmetic is done in float32: a value is
// loaded with to_float(), combined, and stored back with round-to-nearest-even (what every
// hardware conversion does), so a CPU result matches a GPU's bit for bit.
#include <bit>
#include <cstdint>

namespace lockstep {

/// IEEE 754 binary16 (float16): 1 sign, 5 exponent, 10 mantissa bits.
struct Float16 {
  std::uint16_t bits = 0;
};
/// bfloat16: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits).
struct BFloat16 {
  std::uint16_t bits = 0;
};

inline float to_float(Float16 h) {
  // Shift exponent and mantissa into place, rebias, then fix up Inf/NaN and subnormals.
  constexpr std::uint32_t kShiftedExp = 0x7c00u << 13;
  std::uint32_t u = static_cast<std::uint32_t>(h.bits & 0x7fffu) << 13;
  const std::uint32_t exp = u & kShiftedExp;
  u += (127u - 15u) << 23;
  if (exp == kShiftedExp) {
    u += (128u - 16u) << 23;  // Inf / NaN keep an all-ones exponent
  } else if (exp == 0) {
    u += 1u << 23;  // zero / subnormal: renormalise through a float subtraction
    u = std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) - std::bit_cast<float>(113u << 23));
  }
  u |= static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  return std::bit_cast<float>(u);
}

inline Float16 to_float16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint16_t out;
  if (u >= ((127u + 16u) << 23)) {
    out = u > (255u << 23) ? 0x7e00 : 0x7c00;  // NaN stays (quiet) NaN; too large becomes Inf
  } else if (u < (113u << 23)) {
    // Subnormal or zero: adding 0.5 aligns the 10 mantissa bits at the bottom, and the
    // float addition rounds to nearest even for us.
    const float v = std::bit_cast<float>(u) + 0.5f;
    out = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) - std::bit_cast<std::uint32_t>(0.5f));
  } else {
    const std::uint32_t mant_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu + mant_odd;  // rebias, round half to even
    out = static_cast<std::uint16_t>(u >> 13);
  }
  return Float16{static_cast<std::uint16_t>(out | (sign >> 16))};
}

inline float to_float(BFloat16 b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16); }

inline BFloat16 to_bfloat16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);  // round half to even
  return BFloat16{static_cast<std::uint16_t>(rounded >> 16)};
}

}  // namespace lockstep
