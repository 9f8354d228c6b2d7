#include "backend/cuda/cuda_allocator.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace lockstep::backend::cuda {

std::size_t CudaMemory::size_class(std::size_t nbytes) {
  if (nbytes <= (std::size_t{1} << 20)) return std::max<std::size_t>(512, (nbytes + 511) & ~std::size_t{511});
  std::size_t p = std::size_t{1} << 20;
  while (p < nbytes) p <<= 1;
  const std::size_t q = p >> 2;
  std::size_t c = p >> 1;
  while (c < nbytes) c += q;
  return c;
}

void* CudaMemory::allocate(std::size_t cls, const char** why) {
  // cudaSetDevice: the calling thread may have another GPU current (tensors die anywhere).
  if (cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    *why = " (cudaSetDevice failed)";
    return nullptr;
  }
  void* p = nullptr;
  // A block asked for while this thread captures a graph (the first step of a new input shape,
  // its graph's pool and the cache short of it): the capture's thread-local mode prohibits
  // cudaMalloc, which no capture records; in relaxed mode for the call it gives the graph memory
  // of its own, which its pool keeps, never freed, until the graph is destroyed
  // (cudaThreadExchangeStreamCaptureMode; PyTorch's cudaMallocMaybeCapturing).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  const cudaError_t e = cudaMalloc(&p, cls);
  if (relaxed) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (e == cudaSuccess) return p;
  (void)cudaGetLastError();
  *why = e == cudaErrorMemoryAllocation ? "" : " (cudaMalloc failed)";
  return nullptr;
}

void CudaMemory::free(void* block, std::size_t) {
  // At process exit the runtime may be gone already: errors are ignored (never thrown here).
  if (cudaSetDevice(device) == cudaSuccess) (void)cudaFree(block);
  (void)cudaGetLastError();
}

std::string CudaMemory::out_of_memory(const OutOfMemory& e) const {
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) (void)cudaGetLastError();
  std::string msg = label + ": out of device memory" + std::string(e.why) + ": asked for " + bytes_and_units(e.asked);
  if (e.block != e.asked) msg += " (a block of " + bytes_and_units(e.block) + ")";
  if (e.limit) {
    const std::uint64_t left = e.limit > e.in_use ? e.limit - e.in_use : 0;
    msg += ", " + bytes_and_units(left) + " free of this logical device's memory limit of " + bytes_and_units(e.limit);
  }
  msg += ", " + bytes_and_units(free_bytes) + " free on the GPU of " + bytes_and_units(total) +
         "; this context holds " + bytes_and_units(e.in_use) + " in tensors. Use a smaller batch or model";
  if (e.limit) msg += ", or raise the memory limit";
  return msg;
}

}  // namespace lockstep::backend::cuda
