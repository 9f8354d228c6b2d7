#pragma once
// What the CUDA kernels share: launch geometry and the 16-bit float conversions (the CPU
// backend's algorithms, so that a GPU result rounds exactly as the CPU's does).
#include <bit>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_device.hpp"
#include "lockstep/core/half.hpp"

namespace lockstep::backend::cuda {

constexpr int kThreads = 256;
/// Blocks for n elements with grid-stride loops.
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}
#define LOCKSTEP_GRID_LOOP(i, n)                                                                      \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// ---- storage types: float, Float16, BFloat16 (16-bit patterns), int32, int64, uint8 ----
__host__ __device__ inline float f16_to_float(std::uint16_t bits) {
  constexpr std::uint32_t kShiftedExp = 0x7c00u << 13;
  std::uint32_t u = static_cast<std::uint32_t>(bits & 0x7fffu) << 13;
  const std::uint32_t exp = u & kShiftedExp;
  u += (127u - 15u) << 23;
  if (exp == kShiftedExp) {
    u += (128u - 16u) << 23;
  } else if (exp == 0) {
    u += 1u << 23;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(__uint_as_float(u) - __uint_as_float(113u << 23));
#else
    u = std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) - std::bit_cast<float>(113u << 23));
#endif
  }
  u |= static_cast<std::uint32_t>(bits & 0x8000u) << 16;
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}
__device__ inline std::uint16_t float_to_f16(float f) {
  std::uint32_t u = __float_as_uint(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint16_t out;
  if (u >= ((127u + 16u) << 23)) {
    out = u > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (u < (113u << 23)) {
    const float v = __fadd_rn(__uint_as_float(u), 0.5f);  // no contraction: the rounding is the point
    out = static_cast<std::uint16_t>(__float_as_uint(v) - __float_as_uint(0.5f));
  } else {
    const std::uint32_t mant_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu + mant_odd;
    out = static_cast<std::uint16_t>(u >> 13);
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}
__device__ inline float bf16_to_float(std::uint16_t bits) { return __uint_as_float(static_cast<std::uint32_t>(bits) << 16); }
__device__ inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// Load to float32 and store with round-to-nearest-even (the CPU backend's Elem<T>).
template <typename T>
struct Elem {
  __device__ static float load(T v) { return static_cast<float>(v); }
  __device__ static T store(float v) { return static_cast<T>(v); }
};
template <>
struct Elem<Float16> {
  __device__ static float load(Float16 v) { return f16_to_float(v.bits); }
  __device__ static Float16 store(float v) {
    Float16 h;
    h.bits = float_to_f16(v);
    return h;
  }
};
template <>
struct Elem<BFloat16> {
  __device__ static float load(BFloat16 v) { return bf16_to_float(v.bits); }
  __device__ static BFloat16 store(float v) {
    BFloat16 h;
    h.bits = float_to_bf16(v);
    return h;
  }
};
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;


/// How a broadcast reads its operands: the odometer, or one of the cases that need none.
enum class BcastKind : int { kGeneral, kContiguous, kScalarB, kScalarA };
BcastKind bcast_kind(const BroadcastDesc& d, std::int64_t* numel);  // storage.cu
__device__ inline void bcast_offsets(const BroadcastDesc& d, BcastKind kind, std::int64_t i, std::int64_t* ao,
                                     std::int64_t* bo) {
  switch (kind) {
    case BcastKind::kContiguous: *ao = i; *bo = i; return;
    case BcastKind::kScalarB: *ao = i; *bo = 0; return;
    case BcastKind::kScalarA: *ao = 0; *bo = i; return;
    case BcastKind::kGeneral: break;
  }
  std::int64_t a = 0, b = 0;
  for (int k = d.rank - 1; k >= 0; --k) {
    const std::int64_t idx = i % d.dims[k];
    i /= d.dims[k];
    a += idx * d.a_strides[k];
    b += idx * d.b_strides[k];
  }
  *ao = a;
  *bo = b;
}

/// The first largest of (value, index) pairs, NaN winning (numpy's argmax): associative and
/// commutative, so any reduction tree picks what the CPU's left-to-right scan picks.
struct ArgBest {
  float v;
  std::int64_t i;
};
__device__ inline ArgBest arg_better(ArgBest a, ArgBest b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an != bn) return an ? a : b;
  if (!an && a.v != b.v) return a.v > b.v ? a : b;
  return a.i <= b.i ? a : b;
}
__device__ inline ArgBest warp_arg_best(ArgBest x) {
  for (int off = 16; off > 0; off >>= 1) {
    ArgBest o{__shfl_down_sync(0xffffffffu, x.v, off), __shfl_down_sync(0xffffffffu, x.i, off)};
    x = arg_better(x, o);
  }
  return x;
}
/// Sum over a warp in a fixed tree (lane 0 gets it): the same bits on every run.
template <typename A>
__device__ inline A warp_sum(A v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  return v;
}
/// Warp-per-row kernels: 8 warps (rows) per block.
constexpr int kRowsPerBlock = kThreads / 32;
inline unsigned row_blocks(std::int64_t rows) {
  const std::int64_t b = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}
#define LOCKSTEP_WARP_ROW_LOOP(r, rows)                                                                     \
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32; r < (rows); \
       r += static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock)

}  // namespace lockstep::backend::cuda
