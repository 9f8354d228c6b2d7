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

// Kernel templates, instantiated in tables.cpp. F: a floating storage type; T: any.
template <typename T> void fill(ComputeContext&, void*, std::int64_t, double);
template <typename T> void cast(ComputeContext&, const void*, DType, void*, std::int64_t);
template <typename T> void cast_scaled(ComputeContext&, const void*, float, float*, std::int64_t);
template <typename T> void gather_rows_scaled(ComputeContext&, const void*, const std::int64_t*, std::int64_t,
                                              std::int64_t, float, float*);
template <typename T> void compare(ComputeContext&, CompareOp, const BroadcastDesc&, const void*, const void*,
                                   std::uint8_t*);
template <typename T> void gather_rows(ComputeContext&, const void*, const std::int64_t*, std::int64_t, std::int64_t,
                                       void*);
template <typename T> void scatter_add_rows(ComputeContext&, const void*, const std::int64_t*, std::int64_t,
                                            std::int64_t, void*);
template <typename T> void combine(ComputeContext&, ReduceOp, const void* const*, int, void* const*, int,
                                   std::int64_t, std::int64_t);
template <typename T> void argmax(ComputeContext&, const void*, std::int64_t*, std::int64_t, std::int64_t,
                                  std::int64_t);
template <typename T> std::int64_t first_outside(ComputeContext&, const void*, std::int64_t, std::int64_t);

template <typename F> void gemm(ComputeContext&, bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                                const void*, std::int64_t, const void*, std::int64_t, float, void*, std::int64_t);
template <typename F> void unary(ComputeContext&, UnaryOp, const void*, void*, std::int64_t, float, float);
template <typename F> void unary_backward(ComputeContext&, UnaryOp, const void*, const void*, const void*, void*,
                                          std::int64_t, float, float);
template <typename F> void binary(ComputeContext&, BinaryOp, const BroadcastDesc&, const void*, const void*, void*);
template <typename F> void reduce_sum(ComputeContext&, const void*, void*, std::int64_t, std::int64_t, std::int64_t,
                                      float);
template <typename F> void reduce_max(ComputeContext&, const void*, void*, std::int64_t*, std::int64_t,
                                      std::int64_t, std::int64_t);
template <typename F> void reduce_max_backward(ComputeContext&, const std::int64_t*, const void*, void*,
                                               std::int64_t, std::int64_t, std::int64_t);
template <typename F> void softmax(ComputeContext&, const void*, void*, std::int64_t, std::int64_t, bool);
template <typename F> void softmax_backward(ComputeContext&, const void*, const void*, void*, std::int64_t,
                                            std::int64_t, bool);
template <typename F> void bias_activation(ComputeContext&, void*, const void*, std::int64_t, std::int64_t, bool);
template <typename F> double sum_squares(ComputeContext&, const void*, std::int64_t);
template <typename F> void scale_clip(ComputeContext&, const void*, void*, std::int64_t, float, float);

// float32 only: losses, dropout and optimizer updates keep float32 (master weights).
void sparse_softmax_xent(ComputeContext&, const void*, const std::int64_t*, void*, void*, std::int64_t,
                         std::int64_t);
void sparse_softmax_xent_backward(ComputeContext&, const void*, const std::int64_t*, const void*, void*,
                                  std::int64_t, std::int64_t);
void one_hot(ComputeContext&, const std::int64_t*, std::int64_t, std::int64_t, void*);
template <typename F>
void dropout_mask(ComputeContext&, void*, std::int64_t, std::int64_t, float, std::uint64_t, std::uint64_t,
                  std::uint64_t, std::int64_t);
void sgd_update(ComputeContext&, void*, void*, const void*, std::int64_t, float, float, bool);
void adam_update(ComputeContext&, void*, void*, void*, const void*, std::int64_t, const AdamStep&);
void sgd_update_summed(ComputeContext&, void*, void*, const void* const*, int, void* const*, int, std::int64_t, float,
                       float, bool);
void adam_update_summed(ComputeContext&, void*, void*, void*, const void* const*, int, void* const*, int, std::int64_t,
                        const AdamStep&);
void conv2d(ComputeContext&, const Conv2dDesc&, const void*, const void*, const void*, void*);
void conv2d_backward_data(ComputeContext&, const Conv2dDesc&, const void*, const void*, void*);
void conv2d_backward_weights(ComputeContext&, const Conv2dDesc&, const void*, const void*, void*, void*);
void pool2d(ComputeContext&, const Pool2dDesc&, const void*, void*);
void pool2d_backward(ComputeContext&, const Pool2dDesc&, const void*, const void*, const void*, void*);
// batch_norm.cpp
void batch_norm_reduce(ComputeContext&, const void*, const void*, const void*, const void*, void*, std::int64_t,
                       std::int64_t);
void batch_norm_apply(ComputeContext&, const void*, const void*, const void*, const void*, void*, std::int64_t,
                      std::int64_t);
void batch_norm_backward(ComputeContext&, const void*, const void*, const void*, const void*, const void*,
                         const void*, const void*, void*, std::int64_t, std::int64_t);
// conv_pool.cpp, written for AVX-512 F/BW/VL (elsewhere the table leaves them out and the ops take
// the unfused path).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define LOCKSTEP_CPU_CONV_MAX_POOL 1
void conv2d_max_pool2d(ComputeContext&, const Conv2dDesc&, const Pool2dDesc&, const void*, const void*, const void*,
                       void*, std::uint8_t*);
void conv2d_max_pool2d_backward_weights(ComputeContext&, const Conv2dDesc&, const Pool2dDesc&, const void*,
                                        const void*, const std::uint8_t*, const void*, void*, void*);
void max_unpool2d(ComputeContext&, const Pool2dDesc&, const void*, const std::uint8_t*, const void*, void*);
#endif

}  // namespace lockstep::backend::cpu
