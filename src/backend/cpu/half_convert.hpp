#pragma once
// Bulk conversions between float32 and the 16-bit floats: the one place the CPU backend widens
// and narrows arrays (casts, the widening GEMM). Results are bit-identical to lockstep's scalar
// to_float / to_float16 / to_bfloat16 (core/half.hpp), which the GPU backend also matches.
// float16 uses the F16C instructions where the compiler targets them (vcvtph2ps / vcvtps2ph
// round to nearest even, as the scalar code does); a block of 8 that holds a NaN takes the
// scalar path, because the hardware keeps NaN payloads and the scalar code makes them canonical.
#include <cstdint>
#include <type_traits>

#include "lockstep/core/half.hpp"

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*, which -Wmaybe-uninitialized reports
// where they are inlined (GCC bug 105593, fixed in 13); the report points into this header's range.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace lockstep::backend::cpu {

inline void widen_f16(const Float16* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    // A NaN half has all exponent bits set and a non-zero mantissa: (h & 0x7fff) > 0x7c00.
    const __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7c00))) != 0) {
      for (std::int64_t j = i; j < i + 8; ++j) dst[j] = to_float(src[j]);
      continue;
    }
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void narrow_f16(const float* src, Float16* dst, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__F16C__) && defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (std::int64_t j = i; j < i + 8; ++j) dst[j] = to_float16(src[j]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) dst[i] = to_float16(src[i]);
}

// bfloat16 is a shift (widening) and an add with a NaN select (narrowing), done in integer lanes:
// the compiler does not vectorise the scalar form's branch, and that loop ran at a third of the
// memory bandwidth (casts were 17% of a mixed_bfloat16 step). Not AVX512_BF16's vcvtneps2bf16:
// it flushes subnormals to zero, and the scalar code (and the GPU backend) keeps them.
inline void widen_bf16(const BFloat16* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
#endif
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

inline void narrow_bf16(const float* src, BFloat16* dst, std::int64_t n) {
  std::int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    // u + 0x7fff + lsb wraps as the scalar uint32 sum does; the NaN lanes take hi | 0x40.
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, half), _mm512_and_si512(hi, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i r = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(hi, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
#elif defined(__AVX2__)
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x40);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(hi, one)), 16);
    // |u| > inf as signed int32 is right: |u| has no sign bit.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
    // Every lane is <= 0xffff, so the unsigned-saturating pack is exact.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
#endif
  for (; i < n; ++i) dst[i] = to_bfloat16(src[i]);
}

/// dst = src as float32, for F = float16 or bfloat16.
template <typename F>
void widen_half(const F* src, float* dst, std::int64_t n) {
  if constexpr (std::is_same_v<F, Float16>) widen_f16(src, dst, n);
  else widen_bf16(src, dst, n);
}
/// dst = src rounded to F (nearest even), for F = float16 or bfloat16.
template <typename F>
void narrow_half(const float* src, F* dst, std::int64_t n) {
  if constexpr (std::is_same_v<F, Float16>) narrow_f16(src, dst, n);
  else narrow_bf16(src, dst, n);
}

}  // namespace lockstep::backend::cpu
