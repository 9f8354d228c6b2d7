#include "backend/cuda/cuda_allocator.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "lockstep/core/error.hpp"

namespace lockstep::backend::cuda {

namespace {
std::string human(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.1f %s)", static_cast<unsigned long long>(bytes), v, units[u]);
  return u == 0 ? std::to_string(bytes) + " bytes" : std::string(buf);
}
constexpr std::size_t kMaxBytes = std::size_t{1} << 50;
}  // namespace

CudaCachingAllocator::CudaCachingAllocator(int device, std::string device_label, std::uint64_t limit)
    : device_(device), label_(std::move(device_label)), limit_(limit) {}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

std::size_t CudaCachingAllocator::size_class(std::size_t nbytes) {
  if (nbytes <= (std::size_t{1} << 20)) return std::max<std::size_t>(512, (nbytes + 511) & ~std::size_t{511});
  std::size_t p = std::size_t{1} << 20;
  while (p < nbytes) p <<= 1;
  const std::size_t q = p >> 2;
  std::size_t c = p >> 1;
  while (c < nbytes) c += q;
  return c;
}

void CudaCachingAllocator::throw_out_of_memory(std::size_t nbytes, std::size_t cls, const char* why) {
  std::size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) (void)cudaGetLastError();
  std::string msg = label_ + ": out of device memory" + std::string(why) + ": asked for " + human(nbytes);
  if (cls != nbytes) msg += " (a block of " + human(cls) + ")";
  if (limit_) {
    const std::uint64_t left = limit_ > stats_.bytes_in_use ? limit_ - stats_.bytes_in_use : 0;
    msg += ", " + human(left) + " free of this logical device's memory limit of " + human(limit_);
  }
  msg += ", " + human(free_bytes) + " free on the GPU of " + human(total) + "; this context holds " +
         human(stats_.bytes_in_use) + " in tensors. Use a smaller batch or model";
  if (limit_) msg += ", or raise the memory limit";
  throw ResourceError(msg);
}

void* CudaCachingAllocator::allocate(std::size_t nbytes) {
  const std::size_t cls = size_class(std::min(nbytes, kMaxBytes));
  std::lock_guard<std::mutex> lock(mu_);
  if (nbytes > kMaxBytes) throw_out_of_memory(nbytes, nbytes, "");
  if (limit_ && stats_.bytes_in_use + cls > limit_) throw_out_of_memory(nbytes, cls, " (memory limit)");
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    ++stats_.cache_hits;
    stats_.bytes_in_use += cls;
    stats_.bytes_cached -= cls;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return p;
  }
  // cudaSetDevice: the calling thread may have another GPU current (tensors die anywhere).
  if (cudaSetDevice(device_) != cudaSuccess) {
    (void)cudaGetLastError();
    throw_out_of_memory(nbytes, cls, " (cudaSetDevice failed)");
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, cls);
  if (e == cudaErrorMemoryAllocation && stats_.bytes_cached > 0) {
    (void)cudaGetLastError();
    empty_cache_locked();  // blocks of other sizes may free enough
    e = cudaMalloc(&p, cls);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw_out_of_memory(nbytes, cls, e == cudaErrorMemoryAllocation ? "" : " (cudaMalloc failed)");
  }
  ++stats_.system_allocations;
  stats_.bytes_in_use += cls;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

void CudaCachingAllocator::release(void* ptr, std::size_t nbytes) {
  if (!ptr) return;
  const std::size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[cls].push_back(ptr);
  stats_.bytes_in_use -= cls;
  stats_.bytes_cached += cls;
}

AllocatorStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CudaCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void CudaCachingAllocator::empty_cache_locked() {
  if (free_.empty()) return;
  // cudaFree waits for the device, so work still using a cached block is done first. At
  // process exit the runtime may be gone already: errors are ignored (never thrown here).
  if (cudaSetDevice(device_) == cudaSuccess) {
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) (void)cudaFree(p);
  }
  (void)cudaGetLastError();
  free_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace lockstep::backend::cuda
