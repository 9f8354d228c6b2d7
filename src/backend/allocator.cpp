#include "backend/allocator.hpp"

#include <cstdlib>
#include <new>

namespace lockstep::backend {

std::size_t CachingHostAllocator::size_class(std::size_t nbytes) {
  if (nbytes <= 64) return 64;
  // Round up to a quarter of the next power of two: at most 25% waste, few classes.
  std::size_t p = 64;
  while (p < nbytes) p <<= 1;
  const std::size_t q = p >> 2;
  std::size_t c = p >> 1;
  while (c < nbytes) c += q;
  // aligned_alloc needs a multiple of the alignment.
  return (c + 63) & ~static_cast<std::size_t>(63);
}

CachingHostAllocator::~CachingHostAllocator() { empty_cache(); }

void* CachingHostAllocator::allocate(std::size_t nbytes) {
  const std::size_t cls = size_class(nbytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      ++stats_.cache_hits;
      stats_.bytes_in_use += cls;
      stats_.bytes_cached -= cls;
      return p;
    }
    ++stats_.system_allocations;
    stats_.bytes_in_use += cls;
  }
  void* p = std::aligned_alloc(64, cls);
  if (!p) throw std::bad_alloc();
  return p;
}

void CachingHostAllocator::release(void* ptr, std::size_t nbytes) {
  if (!ptr) return;
  const std::size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[cls].push_back(ptr);
  stats_.bytes_in_use -= cls;
  stats_.bytes_cached += cls;
}

AllocatorStats CachingHostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingHostAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [cls, blocks] : free_) {
    for (void* p : blocks) std::free(p);
  }
  free_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace lockstep::backend
