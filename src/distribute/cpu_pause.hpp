#pragma once
// The spin-wait hint of the barriers that wait for peers on other cores (a thread's or a
// process's): it lets the sibling hyperthread run and saves power while spinning.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace lockstep::distribute {

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace lockstep::distribute
