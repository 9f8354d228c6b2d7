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

#if defined(__F16C__) && defined(__AVX2__)
#include <immintrin.h>
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

// bfloat16 is a shift and an add: plain loops the compiler vectorises.
inline void widen_bf16(const BFloat16* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
inline void narrow_bf16(const float* src, BFloat16* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = to_bfloat16(src[i]);
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
