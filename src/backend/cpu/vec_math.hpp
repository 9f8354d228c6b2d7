#pragma once
// Float32 math on GCC's vector extensions at the machine's own width (-march=native): 16 lanes
// with AVX-512, 8 with AVX, 4 otherwise. The attention tiles, GELU and the softmaxes use these
// where the C library's exp and erf, one element per call, were a quarter of a transformer's
// step. Each function gives every lane the same bits whichever lane it is in, so a loop that
// pads its last partial vector gives an element the same bits wherever a thread's range ends.
#include <bit>
#include <cstdint>
#include <cstring>

namespace lockstep::backend::cpu::vec {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef std::int32_t IVec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }
inline Vec splat(float x) { return Vec{} + x; }

/// exp(x) for x <= ~0 (a score less its row's maximum or log-sum-exp, -x^2 / 2), within 2 ulp;
/// 0 below -87 (where float32's exp leaves the normal range), so the masked scores' -1e9 gives
/// 0. Arguments above 88 are taken as 88. NaN stays NaN.
inline Vec exp(Vec x) {
  const IVec underflow = x < splat(-87.0f);
  x = underflow ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const Vec n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const Vec r = (x - n * 0.693359375f) - n * -2.12194440e-4f;            // x - n ln 2
  Vec p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Vec y = (p * r * r + r) + 1.0f;
  const IVec two_n = (__builtin_convertvector(n, IVec) + 127) << 23;
  return underflow ? splat(0.0f) : y * std::bit_cast<Vec>(two_n);
}

/// erf(x), a rational approximation on [-4, 4] (Eigen's and XLA's float erf; erf is +-1 in
/// float32 beyond): within a few ulp of the C library's erff. NaN stays NaN.
inline Vec erf(Vec x) {
  x = x < splat(-4.0f) ? splat(-4.0f) : x;
  x = x > splat(4.0f) ? splat(4.0f) : x;
  const Vec x2 = x * x;
  Vec p = splat(-2.72614225801306e-10f);
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  Vec q = splat(-1.45660718464996e-05f);
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * p / q;
}

/// tanh(x) as (1 - e) / (1 + e) with e = exp(-2|x|), the sign put back: within ~1e-7 absolute
/// (not relative: tanh of a tiny x loses digits), enough where it is added to 1 (GELU's tanh
/// form). NaN stays NaN.
inline Vec tanh_abs_accurate(Vec x) {
  const Vec a = x < splat(0.0f) ? -x : x;
  const Vec e = exp(a * -2.0f);
  const Vec t = (1.0f - e) / (1.0f + e);
  return x < splat(0.0f) ? -t : t;
}

/// The sum and the maximum of a vector's lanes.
inline float sum(Vec v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float max(Vec v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = m > v[i] ? m : v[i];
  return m;
}

}  // namespace lockstep::backend::cpu::vec
