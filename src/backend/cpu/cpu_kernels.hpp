#pragma once
// The CPU backend: the reference every other backend is tested against. Kernels are written
// once as templates over the element type; 16-bit floats are loaded to float32, computed, and
// stored back with round-to-nearest-even (Elem<T>), float32 is loaded and stored as is, so
// its loops vectorise exactly as hand-written float loops do.
#include <algorithm>
#include <cstdint>

#include "backend/kernels.hpp"
#include "lockstep/core/half.hpp"

namespace lockstep::backend::cpu {

/// The CPU table for `dtype` (tables.cpp).
const KernelTable& table(DType dtype);
const DeviceOps& device_ops();

template <typename T>
struct Elem {
  static float load(T v) { return static_cast<float>(v); }
  static T store(float v) { return static_cast<T>(v); }
};
template <>
struct Elem<float> {
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};
template <>
struct Elem<Float16> {
  static float load(Float16 v) { return to_float(v); }
  static Float16 store(float v) { return to_float16(v); }
};
template <>
struct Elem<BFloat16> {
  static float load(BFloat16 v) { return to_float(v); }
  static BFloat16 store(float v) { return to_bfloat16(v); }
};

/// Elementwise loops go parallel only past this many elements: below it a pool wake-up
/// costs more than the loop.
constexpr std::int64_t kGrain = 1 << 15;

/// Chunk i starts 16 * i elements past the even split. An even split of a page-multiple array
/// (the flagship's 784 x 128 kernel: two halves of 49 pages) puts the threads' streams at the
/// same offsets in their pages, so in the same cache sets where the threads share a core's
/// caches (a 2-vCPU VM's SMT siblings): Adam over that kernel on 2 threads took 28 us instead
/// of 16. Elementwise loops give the same bits for any split.
constexpr std::int64_t kChunkSkew = 16;

template <typename F>
void parallel(ComputeContext& ctx, std::int64_t n, F&& f) {
  if (n < 2 * kGrain || ctx.threads() == 1) {
    f(std::int64_t{0}, n);
    return;
  }
  // The pool's chunks (ThreadPool::parallel_for): [i * base + min(i, rem), ...) for i < chunks,
  // each at least kGrain long. Monotonic and clamped, the skewed bounds still tile [0, n) should
  // the pool split otherwise.
  const std::int64_t chunks = std::min<std::int64_t>(ctx.threads(), (n + kGrain - 1) / kGrain);
  const std::int64_t base = n / chunks;
  const auto skew = [=](std::int64_t x) { return std::min(n, x + kChunkSkew * (x / base)); };
  ctx.pool().parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) { f(skew(b), skew(e)); });
}

/// Rows split over the pool, each chunk worth about kGrain element-operations.
template <typename F>
void parallel_rows(ComputeContext& ctx, std::int64_t rows, std::int64_t cost_per_row, F&& f) {
  const std::int64_t grain = std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, cost_per_row));
  if (ctx.threads() == 1 || rows < 2 * grain) {
    f(std::int64_t{0}, rows);
  } else {
    ctx.pool().parallel_for(rows, grain, f);
  }
}

// Every kernel of the op list, declared (its definition is in this folder).
#include "backend/backend_kernels.inc"

// conv_pool.cpp, written for AVX-512 F/BW/VL (elsewhere the table leaves them out and the ops take
// the unfused path).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define LOCKSTEP_CPU_CONV_MAX_POOL 1
#endif

}  // namespace lockstep::backend::cpu
