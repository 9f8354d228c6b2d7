#pragma once
// What a GEMM's cuBLASLt plan depends on (gemm.cu keeps one plan per key on each GPU), as plain
// C++ (no CUDA header), so that the CPU suite tests it (tests/backend/cuda_gemm_key_test.cpp): the
// CUDA code runs only on a GPU.
//
// A plan is its descriptors (the product's shape, transposes, leading dimensions and dtype; the
// epilogue's bias) and the algorithm the heuristic chose for them and for the operands'
// alignments (an algorithm may need every byte of alignment it was chosen for). Each of these is
// a named field of the key, compared as a whole: a product whose key differs in any of them gets
// a plan of its own, never one made for another epilogue or for better aligned operands.
#include <compare>
#include <cstdint>
#include <string>

#include "lockstep/core/dtype.hpp"

namespace lockstep::backend::cuda {

/// An operand's alignment in bytes, as cuBLASLt's MIN_ALIGNMENT_* preferences take it: the
/// largest power of two up to 256 that divides its address.
inline std::uint32_t gemm_alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

/// A product: row-major C (m x n) = op(A) op(B) summed over k, plus beta C unless beta_zero.
struct GemmProduct {
  bool ta = false, tb = false;
  std::int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  DType dtype = DType::kF32;
  bool beta_zero = true;
  auto operator<=>(const GemmProduct&) const = default;
};

/// The operands' alignments in bytes (gemm_alignment): A, B, C and the epilogue's bias (256
/// where there is none).
struct GemmAlignments {
  std::uint32_t a = 256, b = 256, c = 256, bias = 256;
  auto operator<=>(const GemmAlignments&) const = default;
};

struct GemmKey {
  GemmProduct product;
  // The epilogue (gemm_bias_activation): the bias [n] added to each row; none is a plain GEMM.
  // Never the ReLU (gemm.cu: cuBLASLt's max(x, 0) may turn a NaN into 0).
  bool bias = false;
  GemmAlignments align;
  bool epilogue() const { return bias; }
  auto operator<=>(const GemmKey&) const = default;
};

/// The key of `product` on these operands, with the epilogue's `bias` (null: none).
inline GemmKey gemm_key(const GemmProduct& product, const void* a, const void* b, const void* c,
                        const void* bias = nullptr) {
  return {.product = product,
          .bias = bias != nullptr,
          .align = {.a = gemm_alignment(a),
                    .b = gemm_alignment(b),
                    .c = gemm_alignment(c),
                    .bias = bias ? gemm_alignment(bias) : 256u}};
}

/// A key in words, for the error that says no algorithm was found for it.
inline std::string gemm_key_str(const GemmKey& key) {
  const GemmProduct& p = key.product;
  const auto n = [](auto v) { return std::to_string(v); };
  std::string s = "m=" + n(p.m) + " n=" + n(p.n) + " k=" + n(p.k) + " (" + dtype_name(p.dtype) + ", A" +
                  (p.ta ? "^T" : "") + " lda=" + n(p.lda) + ", B" + (p.tb ? "^T" : "") + " ldb=" + n(p.ldb) +
                  ", ldc=" + n(p.ldc) + (p.beta_zero ? "" : ", C read (beta != 0)");
  if (key.epilogue()) s += "; epilogue: bias";
  s += "; alignments A " + n(key.align.a) + ", B " + n(key.align.b) + ", C " + n(key.align.c);
  if (key.bias) s += ", bias " + n(key.align.bias);
  return s + " bytes)";
}

}  // namespace lockstep::backend::cuda
