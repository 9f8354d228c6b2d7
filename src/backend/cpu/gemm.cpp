// GEMM on a device's pool: the output is split into row (or column) blocks, one per pool
// thread, each computed by single-threaded oneDNN sgemm. Splitting only the output keeps
// every dot product's summation order fixed for a given pool size (bit-reproducible), and
// oneDNN's own OpenMP team is pinned to one thread so that no second pool fights for cores.
#include <dnnl.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/onednn.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::cpu {

namespace {
void serial_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  onednn::single_threaded();
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  LOCKSTEP_CHECK_T(InternalError, st == dnnl_success, "oneDNN sgemm failed with status ", static_cast<int>(st));
}
}  // namespace

namespace {
void gemm_f32(ComputeContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
              const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
              std::int64_t ldc) {
  const int threads = ctx.threads();
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || flops < 2e6) {
    serial_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= n || m >= 8 * threads) {
    // Row blocks of C: rows [i0, i1) of op(A).
    const std::int64_t grain = std::max<std::int64_t>(8, (m + threads - 1) / threads);
    ctx.pool().parallel_for(m, grain, [&](std::int64_t i0, std::int64_t i1) {
      const float* a_blk = ta ? a + i0 : a + i0 * lda;
      serial_gemm(ta, tb, i1 - i0, n, k, alpha, a_blk, lda, b, ldb, beta, c + i0 * ldc, ldc);
    });
  } else {
    const std::int64_t grain = std::max<std::int64_t>(16, (n + threads - 1) / threads);
    ctx.pool().parallel_for(n, grain, [&](std::int64_t j0, std::int64_t j1) {
      const float* b_blk = tb ? b + j0 * ldb : b + j0;
      serial_gemm(ta, tb, m, j1 - j0, k, alpha, a, lda, b_blk, ldb, beta, c + j0, ldc);
    });
  }
}


// 16-bit operands are widened to float32 (exact), multiplied in float32 and rounded once on
// the way out; a bf16 oneDNN GEMM is the mixed-precision issue's business.
template <typename F>
void widen(const F* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = Elem<F>::load(src[i]);
}
}  // namespace

template <typename F>
void gemm(ComputeContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const void* av, std::int64_t lda, const void* bv, std::int64_t ldb, float beta, void* cv,
          std::int64_t ldc) {
  if constexpr (std::is_same_v<F, float>) {
    gemm_f32(ctx, ta, tb, m, n, k, alpha, static_cast<const float*>(av), lda, static_cast<const float*>(bv), ldb, beta,
             static_cast<float*>(cv), ldc);
  } else {
    const std::int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
    std::vector<float> a(static_cast<std::size_t>(a_rows * lda)), b(static_cast<std::size_t>(b_rows * ldb)),
        c(static_cast<std::size_t>(m * ldc));
    widen(static_cast<const F*>(av), a.data(), a_rows * lda);
    widen(static_cast<const F*>(bv), b.data(), b_rows * ldb);
    F* co = static_cast<F*>(cv);
    if (beta != 0.0f) widen(co, c.data(), m * ldc);
    gemm_f32(ctx, ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) co[i * ldc + j] = Elem<F>::store(c[static_cast<std::size_t>(i * ldc + j)]);
  }
}

#define LOCKSTEP_GEMM(F)                                                                                   \
  template void gemm<F>(ComputeContext&, bool, bool, std::int64_t, std::int64_t, std::int64_t, float,     \
                        const void*, std::int64_t, const void*, std::int64_t, float, void*, std::int64_t);
LOCKSTEP_GEMM(float)
LOCKSTEP_GEMM(Float16)
LOCKSTEP_GEMM(BFloat16)
#undef LOCKSTEP_GEMM

}  // namespace lockstep::backend::cpu
