#pragma once
// The CUDA backend's kernels, as the tables see them (host declarations; the kernels are in
// the .cu files). They follow the CPU backend's semantics (src/backend/cpu), which the parity
// harness checks row by row; where they differ it is said at the kernel.
#include <cstddef>
#include <cstdint>

#include "backend/kernels.hpp"
#include "lockstep/core/half.hpp"

namespace lockstep::backend::cuda {

// Kernel templates (storage.cu, elementwise.cu, nn.cu, optimizer.cu, gemm.cu). F: a floating
// storage type; T: any.
template <typename T> void fill(ComputeContext&, void*, std::int64_t, double);
template <typename T> void cast(ComputeContext&, const void*, DType, void*, std::int64_t);
template <typename T> void compare(ComputeContext&, CompareOp, const BroadcastDesc&, const void*, const void*,
                                   std::uint8_t*);
template <typename T> void gather_rows(ComputeContext&, const void*, const std::int64_t*, std::int64_t, std::int64_t,
                                       void*);
template <typename T> void scatter_add_rows(ComputeContext&, const void*, const std::int64_t*, std::int64_t,
                                            std::int64_t, void*);
template <typename T> void combine(ComputeContext&, ReduceOp, const void* const*, int, void* const*, int,
                                   std::int64_t, std::int64_t);
template <typename T> void argmax(ComputeContext&, const void*, std::int64_t*, std::int64_t, std::int64_t,
                                  std::int64_t);
template <typename T> std::int64_t first_outside(ComputeContext&, const void*, std::int64_t, std::int64_t);
template <typename T> void cast_scaled(ComputeContext&, const void*, float, float*, std::int64_t);
template <typename T> void gather_rows_scaled(ComputeContext&, const void*, const std::int64_t*, std::int64_t,
                                              std::int64_t, float, float*);

template <typename F> void gemm(ComputeContext&, bool, bool, std::int64_t, std::int64_t, std::int64_t, float,
                                const void*, std::int64_t, const void*, std::int64_t, float, void*, std::int64_t);
template <typename F> void unary(ComputeContext&, UnaryOp, const void*, void*, std::int64_t, float, float);
template <typename F> void unary_backward(ComputeContext&, UnaryOp, const void*, const void*, const void*, void*,
                                          std::int64_t, float, float);
template <typename F> void binary(ComputeContext&, BinaryOp, const BroadcastDesc&, const void*, const void*, void*);
template <typename F> void reduce_sum(ComputeContext&, const void*, void*, std::int64_t, std::int64_t, std::int64_t,
                                      float);
template <typename F> void reduce_max(ComputeContext&, const void*, void*, std::int64_t*, std::int64_t,
                                      std::int64_t, std::int64_t);
template <typename F> void reduce_max_backward(ComputeContext&, const std::int64_t*, const void*, void*,
                                               std::int64_t, std::int64_t, std::int64_t);
template <typename F> void softmax(ComputeContext&, const void*, void*, std::int64_t, std::int64_t, bool);
template <typename F> void softmax_backward(ComputeContext&, const void*, const void*, void*, std::int64_t,
                                            std::int64_t, bool);
template <typename F> void bias_activation(ComputeContext&, void*, const void*, std::int64_t, std::int64_t, bool);
template <typename F> double sum_squares(ComputeContext&, const void*, std::int64_t);
template <typename F> void scale_clip(ComputeContext&, const void*, void*, std::int64_t, float, float);

// float32 only: losses, dropout and optimizer updates keep float32 (master weights).
void sparse_softmax_xent(ComputeContext&, const void*, const std::int64_t*, void*, void*, std::int64_t,
                         std::int64_t);
void sparse_softmax_xent_backward(ComputeContext&, const void*, const std::int64_t*, const void*, void*,
                                  std::int64_t, std::int64_t);
void one_hot(ComputeContext&, const std::int64_t*, std::int64_t, std::int64_t, void*);
template <typename F>
void dropout_mask(ComputeContext&, void*, std::int64_t, std::int64_t, float, std::uint64_t, std::uint64_t,
                  std::uint64_t, std::int64_t);
void sgd_update(ComputeContext&, void*, void*, const void*, std::int64_t, float, float, bool);
void adam_update(ComputeContext&, void*, void*, void*, const void*, std::int64_t, const AdamStep&);

// float32 only: convolution through cuDNN (conv.cu), pooling (pool.cu).
void conv2d(ComputeContext&, const Conv2dDesc&, const void*, const void*, const void*, void*);
void conv2d_backward_data(ComputeContext&, const Conv2dDesc&, const void*, const void*, void*);
void conv2d_backward_weights(ComputeContext&, const Conv2dDesc&, const void*, const void*, void*, void*);
void pool2d(ComputeContext&, const Pool2dDesc&, const void*, void*);
void pool2d_backward(ComputeContext&, const Pool2dDesc&, const void*, const void*, const void*, void*);
// float32 only: batch normalisation's passes (nn.cu).
void batch_norm_reduce(ComputeContext&, const void*, const void*, const void*, const void*, void*, std::int64_t,
                       std::int64_t);
void batch_norm_apply(ComputeContext&, const void*, const void*, const void*, const void*, void*, std::int64_t,
                      std::int64_t);
void batch_norm_backward(ComputeContext&, const void*, const void*, const void*, const void*, const void*,
                         const void*, const void*, void*, std::int64_t, std::int64_t);

bool equal_bytes_on(ComputeContext&, const void*, const void*, std::size_t);

}  // namespace lockstep::backend::cuda

