// What a CUDA GEMM's kept plan depends on (src/backend/cuda/gemm_key.hpp): the CUDA code runs only
// on a GPU, its key is built and compared here. A product gets another product's plan only where
// every field a plan reads is the same.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "backend/cuda/gemm_key.hpp"

namespace lockstep::backend::cuda {
namespace {

// An address whose alignment is exactly `bytes` (a multiple of it, not of twice it, below 512).
const void* aligned_to(std::uint32_t bytes) {
  return reinterpret_cast<const void*>(std::uintptr_t{0x10000} + bytes);
}

const GemmProduct kDense{.m = 32, .n = 64, .k = 16, .lda = 16, .ldb = 64, .ldc = 64, .dtype = DType::kF16};

TEST(CudaGemmKey, AnAlignmentIsTheLargestPowerOfTwoUpTo256ThatDividesTheAddress) {
  for (const std::uint32_t a : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 128u, 256u})
    EXPECT_EQ(gemm_alignment(aligned_to(a)), a) << a;
  EXPECT_EQ(gemm_alignment(reinterpret_cast<const void*>(std::uintptr_t{0x10000})), 256u);  // 64 KiB: capped
  EXPECT_EQ(gemm_alignment(reinterpret_cast<const void*>(std::uintptr_t{0x10006})), 2u);
}

// Two Dense products that differ only in their bias's alignment, or in whether there is a bias,
// each get a plan of their own; the same operands give the same key.
TEST(CudaGemmKey, TheEpilogueAndTheBiasAlignmentEachMakeAnotherKey) {
  const void* x = aligned_to(256);
  const void* w = aligned_to(256);
  const void* y = aligned_to(256);
  const GemmKey base = gemm_key(kDense, x, w, y, aligned_to(16));
  EXPECT_EQ(gemm_key(kDense, x, w, y, aligned_to(16)), base);
  EXPECT_EQ(base.align.bias, 16u);

  const GemmKey other_bias_alignment = gemm_key(kDense, x, w, y, aligned_to(4));
  const GemmKey plain = gemm_key(kDense, x, w, y);
  std::map<GemmKey, int> plans;  // as CudaDevice::plans keeps them
  for (const GemmKey& k : {base, other_bias_alignment, plain, base}) plans.emplace(k, 0);
  EXPECT_EQ(plans.size(), 3u);

  EXPECT_TRUE(base.epilogue() && other_bias_alignment.epilogue());
  EXPECT_FALSE(plain.epilogue());
  // Without a bias its alignment is not part of what differs: a bias-less key is one key.
  EXPECT_EQ(plain.align.bias, 256u);
  EXPECT_EQ(plain, gemm_key(kDense, x, w, y, nullptr));
}

// Each operand's alignment and each field of the product is part of the key.
TEST(CudaGemmKey, EachOperandsAlignmentAndEachFieldOfTheProductMakeAnotherKey) {
  const void* at256 = aligned_to(256);
  const GemmKey base = gemm_key(kDense, at256, at256, at256);
  EXPECT_NE(gemm_key(kDense, aligned_to(8), at256, at256), base);
  EXPECT_NE(gemm_key(kDense, at256, aligned_to(8), at256), base);
  EXPECT_NE(gemm_key(kDense, at256, at256, aligned_to(8)), base);
  auto with = [&](auto change) {
    GemmProduct p = kDense;
    change(p);
    return gemm_key(p, at256, at256, at256);
  };
  EXPECT_NE(with([](GemmProduct& p) { p.ta = true; }), base);
  EXPECT_NE(with([](GemmProduct& p) { p.tb = true; }), base);
  EXPECT_NE(with([](GemmProduct& p) { p.k = 17; }), base);
  EXPECT_NE(with([](GemmProduct& p) { p.ldc = 65; }), base);
  EXPECT_NE(with([](GemmProduct& p) { p.dtype = DType::kBF16; }), base);
  EXPECT_NE(with([](GemmProduct& p) { p.beta_zero = false; }), base);
}

// The error that names a GEMM with no algorithm reads the key's fields.
TEST(CudaGemmKey, TheKeyInWordsNamesEveryFieldAPlanReads) {
  GemmProduct p = kDense;
  p.ta = true;
  EXPECT_EQ(gemm_key_str(gemm_key(p, aligned_to(256), aligned_to(8), aligned_to(16), aligned_to(2))),
            "m=32 n=64 k=16 (float16, A^T lda=16, B ldb=64, ldc=64; epilogue: bias; alignments A 256, B 8, "
            "C 16, bias 2 bytes)");
  p = kDense;
  p.beta_zero = false;
  EXPECT_EQ(gemm_key_str(gemm_key(p, aligned_to(4), aligned_to(4), aligned_to(4))),
            "m=32 n=64 k=16 (float16, A lda=16, B ldb=64, ldc=64, C read (beta != 0); alignments A 4, B 4, C 4 bytes)");
}

}  // namespace
}  // namespace lockstep::backend::cuda
