#pragma once
// A Dense layer's forward in one op (gemm_bias_activation: the product, the bias and the ReLU;
// on CUDA cuBLASLt's epilogue) against the ops it stands for: matmul, then the bias added, then
// relu; the same bits for every floating dtype, with and without a bias or a ReLU, for shapes
// with no rows and an empty inner dimension; one kernel, and a plain product where there is
// neither. On `device`: bit for bit where `exact` (a CPU or an emulated GPU: the CPU's kernels);
// else (CUDA's epilogue: float16 / bfloat16 rounded once where the ops round twice, and the fused
// product's algorithm may sum in another order) within dense_within_rounding's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::test {

inline Tensor dense_case_input(const Shape& shape, float phase, DType dtype, const Device& device) {
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i) * 0.7f + phase);
  return Tensor::from_vector(v, shape).to(dtype).to(device);
}

// Whether `out` is within rounding of `composed` (the ops), for x [m, k] @ w [k, n].
inline bool dense_within_rounding(const Tensor& out, const Tensor& composed, const Tensor& x, const Tensor& w,
                                  const std::string& at) {
  const std::int64_t m = x.dim(0), k = x.dim(1), n = w.dim(1);
  const std::vector<float> o = out.to(DType::kF32).to_vector<float>(), c = composed.to(DType::kF32).to_vector<float>();
  const std::vector<float> xs = x.to(DType::kF32).to_vector<float>(), ws = w.to(DType::kF32).to_vector<float>();
  const float ulp = out.dtype() == DType::kF16 ? 0x1p-10f : out.dtype() == DType::kBF16 ? 0x1p-7f : 0x1p-23f;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double magnitude = 0;
      for (std::int64_t p = 0; p < k; ++p)
        magnitude += std::fabs(static_cast<double>(xs[static_cast<std::size_t>(i * k + p)]) *
                               ws[static_cast<std::size_t>(p * n + j)]);
      const float a = o[static_cast<std::size_t>(i * n + j)], b = c[static_cast<std::size_t>(i * n + j)];
      // The output's rounding, the ops' rounding of the product before the bias (its size at most
      // `magnitude`), and float32's sums of the k products in another order.
      const double bound = 2.0 * ulp * std::fabs(b) + (ulp + static_cast<double>(k) * 0x1p-23) * magnitude;
      if (!(std::fabs(static_cast<double>(a) - b) <= bound)) {
        ADD_FAILURE() << at << ": [" << i << ", " << j << "] " << a << " vs the ops' " << b << " (bound " << bound
                      << ")";
        return false;  // the first is enough
      }
    }
  }
  return true;
}

inline void expect_dense_epilogue_as_composed(const Device& device, bool exact = true) {
  struct Mkn {
    std::int64_t m, k, n;
  };
  for (const Mkn s : {Mkn{64, 784, 128}, Mkn{33, 47, 21}, Mkn{7, 1, 5}, Mkn{0, 8, 4}, Mkn{5, 0, 3}}) {
    for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Tensor x = dense_case_input({s.m, s.k}, 0.1f, dtype, device);
      const Tensor w = dense_case_input({s.k, s.n}, 1.3f, dtype, device);
      const Tensor b = dense_case_input({s.n}, 2.9f, dtype, device);
      for (const bool bias : {false, true}) {
        for (const bool relu : {false, true}) {
          const std::string at = "m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) + " n=" +
                                 std::to_string(s.n) + " " + dtype_name(dtype) + (bias ? " bias" : "") +
                                 (relu ? " relu" : "");
          Tensor composed = matmul(x, w);
          if (bias) composed = add(composed, b);
          if (relu) composed = lockstep::relu(composed);
          const std::uint64_t fused = detail::kernel_launches(device, "gemm_bias_activation");
          const std::uint64_t gemms = detail::kernel_launches(device, "gemm");
          const Tensor out =
              dense(x, w, bias ? b : Tensor(), relu ? FusedActivation::kRelu : FusedActivation::kNone);
          const bool epilogue = bias || relu;
          EXPECT_EQ(detail::kernel_launches(device, "gemm_bias_activation") - fused, epilogue ? 1u : 0u) << at;
          EXPECT_EQ(detail::kernel_launches(device, "gemm") - gemms, epilogue ? 0u : 1u) << at;
          EXPECT_EQ(out.shape(), composed.shape()) << at;
          if (exact) {
            EXPECT_TRUE(out.bitwise_equal(composed)) << at;
          } else {
            EXPECT_TRUE(dense_within_rounding(out, composed, x, w, at));
          }
        }
      }
    }
  }
}

}  // namespace lockstep::test
