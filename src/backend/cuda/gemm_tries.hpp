#pragma once
// The order in which gemm.cu asks cuBLASLt's heuristic for a GEMM's algorithm, as plain C++ (no
// CUDA header), so that the CPU suite tests it (tests/backend/cuda_gemm_tries_test.cpp): the CUDA
// code runs only on a GPU.
//
// Each try widens what the one before allowed, and only where the bits allow it:
//   * The bias in the GEMM's epilogue first; then the plain GEMM, which the kernel follows with
//     bias_activation's bias (an epilogue narrows the algorithms, most of all for a bias on a
//     transposed or oddly aligned output).
//   * Split-K's partial sums kept in float32 first; for float32 then any reduction scheme: in
//     the output type or in place, which for float32 is float32 too (in place is sequenced by
//     counters, so the order is fixed). Never for float16 / bfloat16: their output type rounds
//     every partial sum (2-4 ulps beyond the CPU's one rounding, seen on an H200).
// What does not widen is not tried: the alignments asked are the operands' own (a smaller one
// excludes more algorithms, cuBLASLt's MIN_ALIGNMENT_*), and the workspace is the lane's whole
// one (workspace 0 excludes the split-K algorithms).
#include <string>
#include <vector>

#include "lockstep/core/dtype.hpp"

namespace lockstep::backend::cuda {

struct GemmTry {
  bool epilogue = false;       // the bias in the GEMM's epilogue; false: the plain GEMM
  bool any_reduction = false;  // split-K's partial sums in any scheme; false: float32 or none
  bool operator==(const GemmTry&) const = default;
};

/// The tries for a GEMM of `dtype`, for a bias (`epilogue`) or a plain product, in order.
inline std::vector<GemmTry> gemm_tries(DType dtype, bool epilogue) {
  const bool f32 = dtype == DType::kF32;
  std::vector<GemmTry> tries;
  for (const bool fused : {true, false}) {
    if (fused && !epilogue) continue;
    tries.push_back({fused, false});
    if (f32) tries.push_back({fused, true});
  }
  return tries;
}

/// A try in words, for the error that names what was tried.
inline std::string gemm_try_str(const GemmTry& t) {
  return std::string(t.epilogue ? "bias epilogue" : "plain GEMM") + ", split-K sums " +
         (t.any_reduction ? "in any scheme" : "in float32 only");
}

}  // namespace lockstep::backend::cuda
