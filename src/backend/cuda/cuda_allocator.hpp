#pragma once
// The caching allocator of one CUDA context (PyTorch's CUDACachingAllocator is the model, much
// simplified): size classes (512-byte steps to 1 MiB, then at most 25% above the request),
// free blocks kept per class and handed out again (no cudaMalloc, which synchronises the
// device, in a steady-state step), empty_cache(), peak statistics. Blocks are used on the
// device's one stream, so a block freed on the host may be handed out at once: work queued
// with it runs after the work that used it before (stream order).
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/allocator.hpp"

namespace lockstep::backend::cuda {

class CudaCachingAllocator final : public Allocator {
 public:
  /// Memory of GPU `device`, at most `limit` bytes in use (0: no limit but the device's).
  CudaCachingAllocator(int device, std::string device_label, std::uint64_t limit);
  ~CudaCachingAllocator() override;
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  /// Throws ResourceError naming the device, the bytes asked and the bytes free when the
  /// device (or the limit) has no room, after returning the cache to the device once.
  void* allocate(std::size_t nbytes) override;
  void release(void* ptr, std::size_t nbytes) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  /// Returns every cached block to the device.
  void empty_cache();

  static std::size_t size_class(std::size_t nbytes);

 private:
  void empty_cache_locked();
  [[noreturn]] void throw_out_of_memory(std::size_t nbytes, std::size_t cls, const char* why);

  const int device_;
  const std::string label_;
  const std::uint64_t limit_;
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

}  // namespace lockstep::backend::cuda
