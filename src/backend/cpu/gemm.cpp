// GEMM on a device's pool: the output is split into row (or column) blocks, one per pool
// thread, each computed by single-threaded oneDNN sgemm. Splitting only the output keeps
// every dot product's summation order fixed for a given pool size (bit-reproducible), and
// oneDNN's own OpenMP team is pinned to one thread so that no second pool fights for cores.
#include <dnnl.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/half_convert.hpp"
#include "backend/cpu/onednn.hpp"
#include "core/env.hpp"
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
// Splits C over the device's pool: serial(i0, i1, j0, j1) computes C's block rows [i0, i1) x
// columns [j0, j1), single-threaded. Only the output is split, so every dot product keeps one
// summation order for a given pool size.
template <typename Serial>
void split_output(ComputeContext& ctx, std::int64_t m, std::int64_t n, std::int64_t k, Serial&& serial) {
  const int threads = ctx.threads();
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (threads <= 1 || flops < 2e6) {
    serial(0, m, 0, n);
  } else if (m >= n || m >= 8 * threads) {
    const std::int64_t grain = std::max<std::int64_t>(8, (m + threads - 1) / threads);
    ctx.pool().parallel_for(m, grain, [&](std::int64_t i0, std::int64_t i1) { serial(i0, i1, 0, n); });
  } else {
    const std::int64_t grain = std::max<std::int64_t>(16, (n + threads - 1) / threads);
    ctx.pool().parallel_for(n, grain, [&](std::int64_t j0, std::int64_t j1) { serial(0, m, j0, j1); });
  }
}

// oneDNN's sgemm on a CPU without AVX-512 (its AVX/AVX2 kernels) multiplies most of a layer's
// shapes with a "no-copy" kernel that reads the operand it calls A (column-major, so lockstep's
// row-major B) in place whenever that is 32-byte aligned, and packs it into a contiguous panel
// only when it is not. When B's rows are a multiple of 2 KiB apart (a Dense kernel 512, 1024,
// 4096 ... wide), the rows of the panel it reads in place all fall in the same few cache sets and
// evict one another: 256x1024x784 on one thread ran at 74 GFLOP/s, against 130 with the same rows
// 64 bytes longer (AMD EPYC, oneDNN 2.6 capped at AVX2). lockstep's allocator returns 64-byte
// aligned blocks, so every such product took the slow road. Such a B is copied here, once per
// GEMM, to rows padded past the alias (cost included: 1.6-1.9x faster for 8 to 256 rows of A). The
// kernel, its blocking and its summation order are the same, so are the bits. oneDNN's AVX-512
// sgemm routes these strides to its copy-based kernel itself; there the copy would only cost.
bool pads_b(bool tb, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t ldb) {
  static const bool avx2_kernels = [] {
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core);
    return (isa & avx512) != avx512;
  }();
  constexpr std::int64_t kAliasFloats = 2048 / sizeof(float);
  return avx2_kernels && !tb && m >= 8 && k >= 8 && n >= 16 && ldb % kAliasFloats == 0;
}

// B's k x n block copied to rows of padded_ld(n) floats (64-byte aligned, off the 2 KiB alias),
// on the pool; the buffer is the calling thread's, kept between calls.
std::int64_t padded_ld(std::int64_t n) {
  const std::int64_t ld = (n + 15) / 16 * 16;
  return ld % 512 == 0 ? ld + 16 : ld;
}
const float* padded_copy(ComputeContext& ctx, std::int64_t k, std::int64_t n, const float* b, std::int64_t ldb) {
  thread_local std::vector<float> buffer;
  const std::int64_t ld = padded_ld(n);
  buffer.resize(static_cast<std::size_t>(k * ld + 16));
  float* out = buffer.data() + (16 - reinterpret_cast<std::uintptr_t>(buffer.data()) / sizeof(float) % 16) % 16;
  const auto rows = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      std::memcpy(out + r * ld, b + r * ldb, static_cast<std::size_t>(n) * sizeof(float));
  };
  if (ctx.threads() > 1) ctx.pool().parallel_for(k, 16, rows);
  else rows(0, k);
  return out;
}

void gemm_f32(ComputeContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
              const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
              std::int64_t ldc) {
  if (pads_b(tb, m, n, k, ldb)) {
    b = padded_copy(ctx, k, n, b, ldb);
    ldb = padded_ld(n);
  }
  split_output(ctx, m, n, k, [&](std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
    const float* a_blk = ta ? a + i0 : a + i0 * lda;
    const float* b_blk = tb ? b + j0 * ldb : b + j0;
    serial_gemm(ta, tb, i1 - i0, j1 - j0, k, alpha, a_blk, lda, b_blk, ldb, beta, c + i0 * ldc + j0, ldc);
  });
}

// bfloat16 x bfloat16 with float32 accumulation and a float32 result: oneDNN's matmul, whose
// AVX512_BF16 / AMX kernels do twice the float32 rate. Used where the CPU has them (oneDNN
// reports its ISA; LOCKSTEP_BF16_GEMM=onednn|widen overrides, for tests and benchmarks).
bool onednn_has_bf16_matmul() {
  // A CPU without AVX512 has no oneDNN bf16 matmul at all: creating one throws.
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dnnl::memory::desc a({4, 4}, dt::bf16, tag::ab), c({4, 4}, dt::f32, tag::ab);
    (void)dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Asked at the first bfloat16 GEMM on the CPU; widened, it says once per process that bfloat16
// (mixed_bfloat16) is slower here than float32, and why.
bool native_bf16_gemm() {
  static const bool native = [] {
    const std::string e = env::text("LOCKSTEP_BF16_GEMM");
    const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    const char* why = nullptr;
    if (e == "widen")
      why = "LOCKSTEP_BF16_GEMM=widen";
    else if (e != "onednn" && (isa & bf16) != bf16)
      why = "this CPU has no bfloat16 instructions (AVX512_BF16)";
    else if (onednn_has_bf16_matmul())
      return true;
    else
      why = "oneDNN has no bfloat16 matmul on this CPU";
    std::fprintf(stderr,
                 "lockstep: notice: bfloat16 on the CPU is slower than float32 here: %s, so bfloat16 GEMMs are "
                 "computed in float32\n",
                 why);
    return false;
  }();
  return native;
}

// out (m x k, row-major) = the transpose of the k x m block at a (row stride lda), in 32 x 32 tiles.
void transpose_bf16(const BFloat16* a, std::int64_t lda, std::int64_t k, std::int64_t m, BFloat16* out) {
  constexpr std::int64_t kTile = 32;
  for (std::int64_t r0 = 0; r0 < k; r0 += kTile)
    for (std::int64_t c0 = 0; c0 < m; c0 += kTile) {
      const std::int64_t r1 = std::min(k, r0 + kTile), c1 = std::min(m, c0 + kTile);
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c) out[c * k + r] = a[r * lda + c];
    }
}

// c is float32, or bfloat16 with bf16_out (oneDNN rounds to nearest even on the way out).
void serial_matmul_bf16(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const BFloat16* a,
                        std::int64_t lda, const BFloat16* b, std::int64_t ldb, void* c, std::int64_t ldc,
                        bool bf16_out = false) {
  onednn::single_threaded();
  if (m == 0 || n == 0) return;
  if (ta && k > 0) {
    // oneDNN 2.6 has no AMX (brgemm) matmul for a transposed A: it falls back to its AVX-512
    // gemm at 0.75x the rate. A weight gradient (x^T dy) is such a product; its A is small next
    // to the product (k = the batch), so a row-major copy pays for itself.
    thread_local std::vector<BFloat16> at;
    at.resize(static_cast<std::size_t>(m * k));
    transpose_bf16(a, lda, k, m, at.data());
    a = at.data();
    lda = k;
    ta = false;
  }
  if (k == 0) {
    for (std::int64_t i = 0; i < m; ++i) {
      if (bf16_out) std::fill(static_cast<BFloat16*>(c) + i * ldc, static_cast<BFloat16*>(c) + i * ldc + n, BFloat16{});
      else std::fill(static_cast<float*>(c) + i * ldc, static_cast<float*>(c) + i * ldc + n, 0.0f);
    }
    return;
  }
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  const dnnl::engine& engine = onednn::engine();
  dnnl::stream& stream = onednn::stream();
  // oneDNN's primitive cache would find the kernel again, but making its descriptor costs more
  // than a small GEMM: the primitives of the shapes a thread has seen are kept here.
  using Key =
      std::tuple<bool, bool, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  thread_local std::map<Key, dnnl::matmul> primitives;
  const Key key{ta, tb, bf16_out, m, n, k, lda, ldb, ldc};
  auto it = primitives.find(key);
  const dnnl::memory::desc a_md({m, k}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
  const dnnl::memory::desc b_md({k, n}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
  const dnnl::memory::desc c_md({m, n}, bf16_out ? dt::bf16 : dt::f32, dims{ldc, 1});
  if (it == primitives.end()) {
    if (primitives.size() >= 256) primitives.clear();
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    it = primitives.emplace(key, dnnl::matmul(pd)).first;
  }
  dnnl::memory am(a_md, engine, const_cast<BFloat16*>(a));
  dnnl::memory bm(b_md, engine, const_cast<BFloat16*>(b));
  dnnl::memory cm(c_md, engine, c);
  it->second.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}

void gemm_bf16_native(ComputeContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
                      float alpha, const BFloat16* a, std::int64_t lda, const BFloat16* b, std::int64_t ldb,
                      float beta, BFloat16* c, std::int64_t ldc) {
  // alpha = 1, beta = 0 (every GEMM of a layer): oneDNN rounds the float32 accumulators to
  // bfloat16 as it stores them (nearest even, as lockstep's narrowing; a subnormal result flushes
  // to zero, as in TF on CPU), so no float32 product goes through memory, which for a 2048 x 2048
  // weight gradient was a 16 MiB write and read per layer. Otherwise the float32 product is
  // rounded to bfloat16 once, with alpha and beta applied in float32.
  const bool direct = alpha == 1.0f && beta == 0.0f;
  thread_local std::vector<float> product;
  if (!direct) product.resize(static_cast<std::size_t>(m * n));
  float* p = product.data();
  split_output(ctx, m, n, k, [&](std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
    const BFloat16* a_blk = ta ? a + i0 : a + i0 * lda;
    const BFloat16* b_blk = tb ? b + j0 * ldb : b + j0;
    if (direct) {
      serial_matmul_bf16(ta, tb, i1 - i0, j1 - j0, k, a_blk, lda, b_blk, ldb, c + i0 * ldc + j0, ldc, true);
      return;
    }
    serial_matmul_bf16(ta, tb, i1 - i0, j1 - j0, k, a_blk, lda, b_blk, ldb, p + i0 * n + j0, n);
    for (std::int64_t i = i0; i < i1; ++i)
      for (std::int64_t j = j0; j < j1; ++j) {
        const float v = alpha * p[i * n + j];
        c[i * ldc + j] = Elem<BFloat16>::store(beta == 0.0f ? v : v + beta * Elem<BFloat16>::load(c[i * ldc + j]));
      }
  });
}

// Elsewhere 16-bit operands are widened to float32 (exact), multiplied in float32 and rounded
// once on the way out.
// Per-thread float32 copies of the operands, kept between calls (a step's GEMMs have the same
// shapes every step, so after the first step nothing is allocated).
float* scratch(int which, std::int64_t n) {
  thread_local std::vector<float> buffers[3];
  auto& b = buffers[which];
  if (b.size() < static_cast<std::size_t>(n)) b.resize(static_cast<std::size_t>(n));
  return b.data();
}
}  // namespace

template <typename F>
void gemm(ComputeContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const void* av, std::int64_t lda, const void* bv, std::int64_t ldb, float beta, void* cv,
          std::int64_t ldc) {
  if constexpr (std::is_same_v<F, BFloat16>) {
    if (native_bf16_gemm()) {
      gemm_bf16_native(ctx, ta, tb, m, n, k, alpha, static_cast<const BFloat16*>(av), lda,
                       static_cast<const BFloat16*>(bv), ldb, beta, static_cast<BFloat16*>(cv), ldc);
      return;
    }
  }
  if constexpr (std::is_same_v<F, float>) {
    gemm_f32(ctx, ta, tb, m, n, k, alpha, static_cast<const float*>(av), lda, static_cast<const float*>(bv), ldb, beta,
             static_cast<float*>(cv), ldc);
  } else {
    const std::int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
    float* a = scratch(0, a_rows * lda);
    float* b = scratch(1, b_rows * ldb);
    float* c = scratch(2, m * ldc);
    widen_half(static_cast<const F*>(av), a, a_rows * lda);
    widen_half(static_cast<const F*>(bv), b, b_rows * ldb);
    F* co = static_cast<F*>(cv);
    if (beta != 0.0f) widen_half(co, c, m * ldc);
    gemm_f32(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    for (std::int64_t i = 0; i < m; ++i) narrow_half(c + i * ldc, co + i * ldc, n);
  }
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, gemm)

}  // namespace lockstep::backend::cpu
