#pragma once
// The memory of one GPU as the caching allocator (backend/allocator.hpp) takes it: size classes
// of 512-byte steps to 1 MiB, then at most 25% above the request; blocks from cudaMalloc.
#include <cstddef>
#include <string>

#include "backend/allocator.hpp"

namespace lockstep::backend::cuda {

struct CudaMemory {
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 50;
  static constexpr bool kAllocatesInCapture = true;  // cudaMalloc in relaxed capture mode (allocate)
  static std::size_t size_class(std::size_t nbytes);
  void* allocate(std::size_t cls, const char** why);
  /// cudaFree waits for the device, so work still using a cached block is done first.
  void free(void* block, std::size_t cls);
  /// Names the device, the bytes asked and the bytes free (on the GPU and under the limit).
  std::string out_of_memory(const OutOfMemory& e) const;

  int device = 0;
  std::string label;  // "gpu:0 (NVIDIA H200)"
};

/// The caching allocator of one CUDA context.
using CudaCachingAllocator = CachingAllocator<CudaMemory>;

}  // namespace lockstep::backend::cuda
