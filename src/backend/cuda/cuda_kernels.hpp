#pragma once
// The CUDA backend's kernels, as the tables see them (host declarations; the kernels are in
// the .cu files). They follow the CPU backend's semantics (src/backend/cpu), which the parity
// harness checks row by row; where they differ it is said at the kernel.
#include <cstddef>
#include <cstdint>

#include "backend/kernels.hpp"
#include "lockstep/core/half.hpp"

namespace lockstep::backend::cuda {

// Every kernel of the op list, declared; tables.cpp says which of them this backend defines.
#include "backend/backend_kernels.inc"

bool equal_bytes_on(ComputeContext&, const void*, const void*, std::size_t);

/// y[r, c] += bias[c], then relu when `relu` (relu_of: a NaN stays NaN); bias may be null
/// (elementwise.cu): the bias and ReLU after a product that did not add them itself (conv.cu;
/// gemm.cu's ReLU, and its bias too when cuBLASLt has no epilogue algorithm for a shape).
template <typename F>
void bias_activation(ComputeContext& ctx, void* y, const void* bias, std::int64_t rows, std::int64_t cols, bool relu);

}  // namespace lockstep::backend::cuda

