#pragma once
// Tensors that share one allocation, each with a Storage of its own: a batch's components copied
// to the device in one transfer (DeviceUpload). What is kept by Storage (an integer batch's host
// bytes, host_copy.hpp) sees each as memory of its own, as one made by Tensor::empty; the
// allocation goes back to its allocator once every one of them is gone.
#include <cstddef>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::detail {

/// Uninitialised tensors of these shapes and dtypes on the current context's device, tensor i at
/// byte `offsets[i]` of one allocation (set here: each a multiple of `align`, in order).
std::vector<Tensor> empty_parts(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes, std::size_t align,
                                std::vector<std::size_t>& offsets);

}  // namespace lockstep::detail
