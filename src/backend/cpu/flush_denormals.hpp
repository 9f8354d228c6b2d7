#pragma once
// Subnormal floats flushed to zero on the calling thread while a FlushDenormals lives (x86's
// MXCSR FTZ and DAZ bits; the previous mode is restored). For the optimizer updates: a moment
// whose gradient is (nearly) always zero, such as Adam's m for a weight on a border pixel of
// MNIST that is rarely lit, decays by beta_1 every step and goes subnormal within a few hundred
// steps, and an operation on a subnormal can take a microcode assist of ~100 cycles. With them
// the flagship trained 1.7x slower at batch 32 (Adam was 40% of a step; DESIGN-NOTES, "Subnormal
// moments"). TensorFlow's threads flush denormals everywhere; here only the updates do, where the
// decay makes them.
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace lockstep::backend::cpu {

class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() = default;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned int kFtz = 0x8000;  // results that would be subnormal are zero
  static constexpr unsigned int kDaz = 0x0040;  // subnormal inputs are read as zero
  unsigned int saved_;
#endif
};

}  // namespace lockstep::backend::cpu
