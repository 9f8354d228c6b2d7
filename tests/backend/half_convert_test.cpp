// The bulk 16-bit conversions (F16C where built for it) give exactly the scalar conversions'
// bits, which the GPU backend and every stored tensor rely on: all 65,536 float16 and bfloat16
// patterns widen, and floats around every rounding boundary (float16's and bfloat16's ties),
// subnormals, overflow, infinities and NaNs with payloads narrow, at offsets across an 8- and a
// 16-wide block.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/half_convert.hpp"

namespace lockstep::backend::cpu {
namespace {

// All 65,536 bit patterns of F, and a tail that is not a whole 8- or 16-wide block.
template <typename F, typename Widen>
void expect_every_pattern_widens_to_the_scalar_bits(Widen widen) {
  std::vector<F> h(65536 + 13);
  for (std::size_t i = 0; i < h.size(); ++i) h[i].bits = static_cast<std::uint16_t>(i);
  std::vector<float> got(h.size());
  widen(h.data(), got.data(), static_cast<std::int64_t>(h.size()));
  for (std::size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(to_float(h[i])))
        << "16-bit pattern 0x" << std::hex << h[i].bits;
}

TEST(HalfConvert, EveryFloat16WidensToTheScalarBits) {
  expect_every_pattern_widens_to_the_scalar_bits<Float16>(widen_f16);
}

TEST(HalfConvert, EveryBFloat16WidensToTheScalarBits) {
  expect_every_pattern_widens_to_the_scalar_bits<BFloat16>(widen_bf16);
}

std::vector<float> hard_floats() {
  std::vector<float> v;
  // Every float16 value, and the floats half an ulp of float16 away (ties) and next to them.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float f = to_float(Float16{static_cast<std::uint16_t>(b)});
    if (std::isnan(f)) continue;
    v.push_back(f);
    const float up = std::nextafter(f, std::numeric_limits<float>::infinity());
    const float mid = f + (to_float(Float16{static_cast<std::uint16_t>(b + 1)}) - f) / 2;
    if (std::isfinite(mid)) {
      v.push_back(mid);
      v.push_back(std::nextafter(mid, 0.0f));
      v.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
    v.push_back(up);
  }
  // bfloat16's ties (the low 16 bits exactly 0x8000, even and odd kept bits), their neighbours,
  // and the largest finite floats, which round to infinity.
  for (std::uint32_t hi : {0x0000u, 0x0001u, 0x3f80u, 0x3f81u, 0x7f7fu, 0x8000u, 0xbf80u, 0xbf81u, 0xff7fu})
    for (std::uint32_t lo : {0x7fffu, 0x8000u, 0x8001u, 0xffffu}) v.push_back(std::bit_cast<float>(hi << 16 | lo));
  for (float f : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e30f, 6e-8f, 3e-8f, 2.9e-8f, 1e-40f, -1e-45f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
    v.push_back(f);
  // NaNs with payloads and both signs: the scalar code makes them canonical.
  for (std::uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa12345u, 0xff812345u, 0x7fffffffu})
    v.push_back(std::bit_cast<float>(nan));
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 100000; ++i) v.push_back(std::bit_cast<float>(bits(rng)));
  return v;
}

TEST(HalfConvert, FloatsNarrowToTheScalarBitsAtEveryBlockOffset) {
  const std::vector<float> v = hard_floats();
  for (std::size_t offset = 0; offset < 16; offset += 3) {
    const auto n = static_cast<std::int64_t>(v.size() - offset);
    std::vector<Float16> h(static_cast<std::size_t>(n));
    std::vector<BFloat16> b(static_cast<std::size_t>(n));
    narrow_f16(v.data() + offset, h.data(), n);
    narrow_bf16(v.data() + offset, b.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      const float f = v[offset + static_cast<std::size_t>(i)];
      ASSERT_EQ(h[static_cast<std::size_t>(i)].bits, to_float16(f).bits)
          << "float bits 0x" << std::hex << std::bit_cast<std::uint32_t>(f);
      ASSERT_EQ(b[static_cast<std::size_t>(i)].bits, to_bfloat16(f).bits)
          << "float bits 0x" << std::hex << std::bit_cast<std::uint32_t>(f);
    }
  }
}

}  // namespace
}  // namespace lockstep::backend::cpu
