// The order in which the CUDA GEMM asks cuBLASLt's heuristic for an algorithm
// (src/backend/cuda/gemm_tries.hpp): the CUDA code runs only on a GPU, its ladder runs here.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/gemm_tries.hpp"

namespace lockstep::backend::cuda {
namespace {

// float32: split-K's partial sums in any scheme are float32 too, so each form gets that second try;
// a bias is tried in the epilogue before the plain GEMM (then bias_activation).
TEST(CudaGemmTries, Float32WidensTheReductionsAndFallsBackToThePlainGemm) {
  EXPECT_EQ(gemm_tries(DType::kF32, false), (std::vector<GemmTry>{{false, false}, {false, true}}));
  EXPECT_EQ(gemm_tries(DType::kF32, true),
            (std::vector<GemmTry>{{true, false}, {true, true}, {false, false}, {false, true}}));
}

// float16 / bfloat16: a partial sum in the output type is rounded, so no try allows it; the
// epilogue still falls back to the plain GEMM.
TEST(CudaGemmTries, SixteenBitNeverAddsPartialSumsInTheOutputType) {
  for (const DType d : {DType::kF16, DType::kBF16}) {
    EXPECT_EQ(gemm_tries(d, false), (std::vector<GemmTry>{{false, false}})) << dtype_name(d);
    EXPECT_EQ(gemm_tries(d, true), (std::vector<GemmTry>{{true, false}, {false, false}})) << dtype_name(d);
  }
}

// The error names each try it made.
TEST(CudaGemmTries, EachTryIsNamedInWords) {
  EXPECT_EQ(gemm_try_str({true, false}), "bias epilogue, split-K sums in float32 only");
  EXPECT_EQ(gemm_try_str({false, true}), "plain GEMM, split-K sums in any scheme");
}

}  // namespace
}  // namespace lockstep::backend::cuda
