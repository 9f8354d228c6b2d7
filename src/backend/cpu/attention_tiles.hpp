#pragma once
// The fused attention's arithmetic on blocks held in the first-level cache: a register-blocked
// product of small float32 matrices (C += A B, B's rows a multiple of the vector width long) and
// a vector exp, on vec_math.hpp's vectors at the machine's own width. Every element of C is
// summed over k in order, one multiply-add at a time, whatever the tiling and whichever operand
// is transposed: the same bits from any blocking of the rows.
#include <algorithm>
#include <cstdint>

#include "backend/cpu/vec_math.hpp"

namespace lockstep::backend::cpu::tiles {

using vec::exp;
using vec::IVec;
using vec::kLanes;
using vec::load;
using vec::splat;
using vec::store;
using vec::Vec;

/// n rounded up to a whole number of vectors.
inline std::int64_t padded(std::int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

namespace detail {
// Rows [0, R) and columns [0, W vectors) of C (+)= A B over k < k_len; A's element (r, k) is
// a[r * ar + k * ak].
template <int R, int W>
void tile(const float* a, std::int64_t ar, std::int64_t ak, const float* b, std::int64_t ldb,
          std::int64_t k_len, float* c, std::int64_t ldc, bool accumulate) {
  Vec acc[R][W];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) acc[r][w] = accumulate ? load(c + r * ldc + w * kLanes) : Vec{};
  for (std::int64_t k = 0; k < k_len; ++k) {
    Vec bv[W];
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) bv[w] = load(b + k * ldb + w * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float x = a[r * ar + k * ak];
#pragma GCC unroll 4
      for (int w = 0; w < W; ++w) acc[r][w] += x * bv[w];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) store(c + r * ldc + w * kLanes, acc[r][w]);
}

// The last rows < R of a panel, R - 1 down to 1.
template <int R, int W>
void rest(std::int64_t rows, const float* a, std::int64_t ar, std::int64_t ak, const float* b,
          std::int64_t ldb, std::int64_t k_len, float* c, std::int64_t ldc, bool accumulate) {
  if constexpr (R > 0) {
    if (rows == R) return tile<R, W>(a, ar, ak, b, ldb, k_len, c, ldc, accumulate);
    rest<R - 1, W>(rows, a, ar, ak, b, ldb, k_len, c, ldc, accumulate);
  }
}

// Every row of C's columns [0, W vectors).
template <int W>
void panel(std::int64_t m, const float* a, std::int64_t ar, std::int64_t ak, const float* b, std::int64_t ldb,
           std::int64_t k_len, float* c, std::int64_t ldc, bool accumulate) {
  constexpr int R = W >= 3 ? 6 : 8;  // at most 24 accumulators
  std::int64_t r = 0;
  for (; r + R <= m; r += R) tile<R, W>(a + r * ar, ar, ak, b, ldb, k_len, c + r * ldc, ldc, accumulate);
  rest<R - 1, W>(m - r, a + r * ar, ar, ak, b, ldb, k_len, c + r * ldc, ldc, accumulate);
}
}  // namespace detail

/// C[m, n] (+)= A[m, k_len] B[k_len, n]: A's element (r, k) is a[r * ar + k * ak] (either
/// layout), B and C row-major with leading dimensions ldb and ldc; n a multiple of kLanes.
/// accumulate false: C = A B.
inline void gemm(std::int64_t m, std::int64_t n, std::int64_t k_len, const float* a, std::int64_t ar,
                 std::int64_t ak, const float* b, std::int64_t ldb, float* c, std::int64_t ldc,
                 bool accumulate) {
  for (std::int64_t n0 = 0; n0 < n; n0 += 4 * kLanes) {
    const std::int64_t w = std::min<std::int64_t>(4, (n - n0) / kLanes);
    const float* bp = b + n0;
    float* cp = c + n0;
    switch (w) {
      case 4:
        detail::panel<4>(m, a, ar, ak, bp, ldb, k_len, cp, ldc, accumulate);
        break;
      case 3:
        detail::panel<3>(m, a, ar, ak, bp, ldb, k_len, cp, ldc, accumulate);
        break;
      case 2:
        detail::panel<2>(m, a, ar, ak, bp, ldb, k_len, cp, ldc, accumulate);
        break;
      default:
        detail::panel<1>(m, a, ar, ak, bp, ldb, k_len, cp, ldc, accumulate);
        break;
    }
  }
}

using vec::max;
using vec::sum;

}  // namespace lockstep::backend::cpu::tiles
