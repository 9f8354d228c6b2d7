// GEMM through cuBLASLt: float32 (TF32 tensor cores only when LOCKSTEP_CUDA_TF32=1: TF32 keeps
// 10 mantissa bits, far outside float32's parity tolerance), float16 and bfloat16 with float32
// accumulation and one rounding of the result (as the CPU's widening GEMM). Row-major C =
// op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: B and A swap places, nothing moves.
// A plan (descriptors and the heuristic's algorithm) is made once per key and kept (gemm_key.hpp:
// what a plan depends on); the heuristic is asked in gemm_tries.hpp's order, so a shape it has no
// algorithm for under the first preferences gets the next (and a Dense layer's bias the plain
// GEMM, then bias_activation) before an error names what was tried.
//
// gemm_bias_activation: Dense's bias in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS), its ReLU
// bias_activation's kernel after it.
//   * Which bias: cuBLASLt's bias vector has the length of D's rows and is added to each of D's
//     columns, D column-major. Our D is C^T, column-major n x m (see above): its rows are our C's
//     columns, so its bias vector is our per-column bias [n], element i added to D(i, j) = C[j, i].
//   * Bits: the epilogue adds the bias to the float32 result of the product (alpha = 1, beta = 0:
//     no C read), then rounds once to the output type. For float32 that is what gemm's float32
//     store then bias_activation's float32 add compute; for float16 / bfloat16 the unfused path
//     rounds twice (the product to 16 bits, then the sum), the epilogue once, so the two may
//     differ by an ulp of the output, within the CPU parity's tolerance. The algorithm the
//     heuristic picks for the fused product may also sum k in another order than the plain one's.
//     jit_compile on or off runs this same kernel, so their bits agree. The ReLU after it gives
//     the bits of a ReLU in the epilogue: rounding keeps a value's sign.
//   * Why not the ReLU too (CUBLASLT_EPILOGUE_RELU_BIAS, one pass over y fewer): cuBLASLt documents
//     its ReLU as "x := max(x, 0)" and says nothing of NaN; a max in the IEEE 754 sense (fmaxf,
//     CUTLASS's epilogues) gives 0 for max(NaN, 0), so a Dense layer's NaN would leave it as 0 and
//     the loss finite where every other path keeps it (kernels.hpp's relu_of).

#include <memory>
#include <string>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"
#include "backend/cuda/gemm_key.hpp"
#include "backend/cuda/gemm_tries.hpp"

namespace lockstep::backend::cuda {

struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // The bias / ReLU is in the product's epilogue; false for a plain GEMM (gemm_bias_activation
  // then runs bias_activation after it).
  bool epilogue = false;
  // The epilogue's bias pointer is an attribute of `op`, set before each product: held from the
  // set to the queued product, since a plan serves every lane of the device.
  std::mutex bias_mu;
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

void destroy(GemmPlan* p) {
  if (p->c) cublasLtMatrixLayoutDestroy(p->c);
  if (p->b) cublasLtMatrixLayoutDestroy(p->b);
  if (p->a) cublasLtMatrixLayoutDestroy(p->a);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  delete p;
}
struct PlanDelete {
  void operator()(GemmPlan* p) const { destroy(p); }
};
using PlanPtr = std::unique_ptr<GemmPlan, PlanDelete>;
struct PrefDelete {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};

template <typename V>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const V& v) {
  check(cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof v), "cublasLtMatmulDescSetAttribute");
}
template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
  check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v), "cublasLtMatmulPreferenceSetAttribute");
}

// The descriptors of `key` under try `t` (gemm_tries.hpp) and the heuristic's algorithm for them
// (`bias`: this product's bias vector, null without one); null when the heuristic has none (its status in *status).
template <typename F>
PlanPtr try_plan(CudaLane& d, const GemmKey& key, const GemmTry& t, const void* bias, cublasStatus_t* status) {
  const GemmProduct& g = key.product;
  const cudaDataType_t dt = data_type<F>();
  const cublasComputeType_t compute =
      std::is_same_v<F, float> && tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  PlanPtr p(new GemmPlan);
  check(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // Column-major: the first operand is our B, the second our A.
  const cublasOperation_t op_first = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(p->op, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
  set_desc(p->op, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
  if (t.epilogue) {
    // D's rows are our columns (the file's header): the bias [n] is cuBLASLt's per-row vector.
    set_desc(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(CUBLASLT_EPILOGUE_BIAS));
    set_desc(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(dt));  // the output's
    set_desc(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // this call's; reset by each product
    p->epilogue = true;
  }
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  check(cublasLtMatrixLayoutCreate(&p->a, dt, g.tb ? u(g.k) : u(g.n), g.tb ? u(g.n) : u(g.k), g.ldb),
        "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&p->b, dt, g.ta ? u(g.m) : u(g.k), g.ta ? u(g.k) : u(g.m), g.lda),
        "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&p->c, dt, u(g.n), u(g.m), g.ldc), "cublasLtMatrixLayoutCreate");
  cublasLtMatmulPreference_t raw = nullptr;
  check(cublasLtMatmulPreferenceCreate(&raw), "cublasLtMatmulPreferenceCreate");
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDelete> pref(raw);
  set_pref(raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(d.workspace_bytes));
  // Split-K first only with partial sums kept in float32 (the compute type), added in a separate
  // pass: the default also allows adding them in the output type (in the workspace, or in place in
  // the output), which for float16 / bfloat16 rounds every partial sum (seen on an H200: 2-4
  // float16 ulps off a 12x150 by 150x700 product, beyond the CPU's one rounding). float32's later
  // tries allow every scheme (gemm_tries.hpp).
  const std::uint32_t reductions = t.any_reduction
                                       ? static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK)
                                       : CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  set_pref(raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reductions);
  // The first operand is our B: its alignment is align.b.
  set_pref(raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align.b);
  set_pref(raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align.a);
  set_pref(raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align.c);
  set_pref(raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align.c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  *status = cublasLtMatmulAlgoGetHeuristic(d.lt, p->op, p->a, p->b, p->c, p->c, raw, 1, &result, &found);
  if (*status != CUBLAS_STATUS_SUCCESS || found == 0) return nullptr;
  p->algo = result.algo;
  return p;
}

// The plan of the first try the heuristic has an algorithm for; InternalError naming the GEMM
// (its key) and every try when there is none.
template <typename F>
GemmPlan* make_plan(CudaLane& d, const GemmKey& key, const void* bias) {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::string tried;
  for (const GemmTry& t : gemm_tries(key.product.dtype, key.epilogue())) {
    if (PlanPtr p = try_plan<F>(d, key, t, bias, &status)) return p.release();
    tried += (tried.empty() ? "" : "; ") + gemm_try_str(t);
  }
  throw InternalError("cuBLASLt has no GEMM algorithm for " + gemm_key_str(key) + "; tried: " + tried +
                      " (last status " + std::to_string(static_cast<int>(status)) + ")");
}

// The kept plan of a product (made on first use) for its key (gemm_key.hpp).
template <typename F>
GemmPlan* plan_for(CudaLane& d, const GemmKey& key, const void* bias) {
  const std::lock_guard<std::mutex> lock(d.device->plans_mu);
  auto& plans = d.device->plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan<F>(d, key, bias)).first;
  return it->second;
}

// Queues the product of `plan` on the lane (with this call's bias when its epilogue adds one).
void run(CudaLane& d, GemmPlan& plan, float alpha, const void* a, const void* b, float beta, void* c,
         const void* bias) {
  const std::lock_guard<std::mutex> queue(d.gemm_mu);
  std::unique_lock<std::mutex> bias_lock;
  if (plan.epilogue && bias) {
    bias_lock = std::unique_lock<std::mutex>(plan.bias_mu);
    set_desc(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  check(cublasLtMatmul(d.lt, plan.op, &alpha, b, plan.a, a, plan.b, &beta, c, plan.c, c, plan.c, &plan.algo,
                       d.workspace, d.workspace_bytes, d.stream),
        "cublasLtMatmul");
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
  const GemmKey key = gemm_key({ta, tb, m, n, k, lda, ldb, ldc, dtype_of_v<F>, beta == 0.0f}, a, b, c);
  GemmPlan* plan = plan_for<F>(d, key, nullptr);
  run(d, *plan, alpha, a, b, beta, c, nullptr);
}

template <typename F>
void gemm_bias_activation(ComputeContext& ctx, const void* x, const void* w, const void* bias, void* y, std::int64_t m,
                          std::int64_t n, std::int64_t k, bool relu) {
  if (m == 0 || n == 0) return;
  if (k == 0 || !bias) {  // zeros (scale_kernel), or no epilogue: the two kernels
    gemm<F>(ctx, false, false, m, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
    bias_activation<F>(ctx, y, bias, m, n, relu);
    return;
  }
  CudaLane& d = lane(ctx);
  const GemmKey key = gemm_key({false, false, m, n, k, k, n, n, dtype_of_v<F>, true}, x, w, y, bias);
  GemmPlan* plan = plan_for<F>(d, key, bias);
  run(d, *plan, 1.0f, x, w, 0.0f, y, bias);
  // The ReLU (the file's header), and the bias too where no algorithm took it (gemm_tries.hpp);
  // nothing to launch where the epilogue did it all.
  bias_activation<F>(ctx, y, plan->epilogue ? nullptr : bias, m, n, relu);
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, gemm)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, gemm_bias_activation)

}  // namespace lockstep::backend::cuda
