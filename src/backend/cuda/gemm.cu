// GEMM through cuBLASLt: float32 (TF32 tensor cores only when LOCKSTEP_CUDA_TF32=1: TF32 keeps
// 10 mantissa bits, far outside float32's parity tolerance), float16 and bfloat16 with float32
// accumulation and one rounding of the result (as the CPU's widening GEMM). Row-major C =
// op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: B and A swap places, nothing moves.
// A plan (descriptors and the heuristic's algorithm) is made once per shape and kept.

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"

namespace lockstep::backend::cuda {

struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

namespace {
template <typename F>
__global__ void scale_kernel(F* c, std::int64_t m, std::int64_t n, std::int64_t ldc, float beta) {
  LOCKSTEP_GRID_LOOP(i, m * n) {
    const std::int64_t r = i / n, col = i - r * n;
    F* p = c + r * ldc + col;
    *p = Elem<F>::store(beta == 0.0f ? 0.0f : beta * Elem<F>::load(*p));
  }
}

template <typename F>
cudaDataType_t data_type() {
  if constexpr (std::is_same_v<F, Float16>) return CUDA_R_16F;
  else if constexpr (std::is_same_v<F, BFloat16>) return CUDA_R_16BF;
  else return CUDA_R_32F;
}

std::uint32_t alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

template <typename F>
GemmPlan* make_plan(CudaLane& d, const GemmKey& key, std::uint32_t align_a, std::uint32_t align_b,
                    std::uint32_t align_c) {
  const cudaDataType_t dt = data_type<F>();
  const cublasComputeType_t compute =
      std::is_same_v<F, float> && tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  auto* p = new GemmPlan;
  check(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // Column-major: the first operand is our B, the second our A.
  const cublasOperation_t op_first = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first),
        "cublasLtMatmulDescSetAttribute");
  check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second),
        "cublasLtMatmulDescSetAttribute");
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  check(cublasLtMatrixLayoutCreate(&p->a, dt, key.tb ? u(key.k) : u(key.n), key.tb ? u(key.n) : u(key.k), key.ldb),
        "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&p->b, dt, key.ta ? u(key.m) : u(key.k), key.ta ? u(key.k) : u(key.m), key.lda),
        "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&p->c, dt, u(key.n), u(key.m), key.ldc), "cublasLtMatrixLayoutCreate");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t ws = d.workspace_bytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "cublasLtMatmulPreferenceSetAttribute");
  // Split-K only with partial sums kept in float32 (the compute type), added in a separate pass: the
  // default also allows adding them in the output type (in the workspace, or in place in the
  // output), which for float16 / bfloat16 rounds every partial sum (seen on an H200: 2-4 float16
  // ulps off a 12x150 by 150x700 product, beyond the CPU's one rounding).
  const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                             sizeof reductions),
        "cublasLtMatmulPreferenceSetAttribute");
  // The first operand is our B: its alignment is align_b.
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_b, sizeof align_b),
        "cublasLtMatmulPreferenceSetAttribute");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_a, sizeof align_a),
        "cublasLtMatmulPreferenceSetAttribute");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof align_c),
        "cublasLtMatmulPreferenceSetAttribute");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof align_c),
        "cublasLtMatmulPreferenceSetAttribute");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(d.lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    throw InternalError("cuBLASLt has no GEMM algorithm for m=" + std::to_string(key.m) + " n=" +
                        std::to_string(key.n) + " k=" + std::to_string(key.k) + " (status " +
                        std::to_string(static_cast<int>(st)) + ")");
  }
  p->algo = result.algo;
  return p;
}
}  // namespace

template <typename F>
void gemm(ComputeContext& ctx, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
          const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta, void* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  CudaLane& d = lane(ctx);
  if (k == 0) {
    scale_kernel<F><<<blocks_for(m * n), kThreads, 0, d.stream>>>(static_cast<F*>(c), m, n, ldc, beta);
    check_launch("gemm (k = 0)");
    return;
  }
  const std::uint32_t al_a = alignment(a), al_b = alignment(b), al_c = alignment(c);
  // A plan asks for its operands' alignments: one per (dtype, alignment of each operand).
  const auto lg = [](std::uint32_t a) { return static_cast<int>(__builtin_ctz(a)); };
  GemmKey key{ta, tb, m, n, k, lda, ldb, ldc,
              (static_cast<int>(data_type<F>()) << 24) | (lg(al_a) << 16) | (lg(al_b) << 8) | lg(al_c), beta == 0.0f};
  GemmPlan* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(d.device->plans_mu);
    auto& plans = d.device->plans;
    auto it = plans.find(key);
    if (it == plans.end()) it = plans.emplace(key, make_plan<F>(d, key, al_a, al_b, al_c)).first;
    plan = it->second;
  }
  const std::lock_guard<std::mutex> queue(d.gemm_mu);
  check(cublasLtMatmul(d.lt, plan->op, &alpha, b, plan->a, a, plan->b, &beta, c, plan->c, c, plan->c, &plan->algo,
                       d.workspace, d.workspace_bytes, d.stream),
        "cublasLtMatmul");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, gemm)

}  // namespace lockstep::backend::cuda
