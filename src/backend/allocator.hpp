#pragma once
// Caching allocator: freed blocks go to size-class free lists and are handed out again,
// so a steady-state training step never calls the system allocator for tensor data.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lockstep::backend {

struct AllocatorStats {
  std::uint64_t system_allocations = 0;  // blocks obtained from the OS/system allocator
  std::uint64_t cache_hits = 0;          // allocations served from the cache
  std::uint64_t bytes_in_use = 0;
  std::uint64_t bytes_cached = 0;
  std::uint64_t peak_bytes_in_use = 0;   // high-water mark of bytes_in_use since the last reset_peak()
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void release(void* ptr, std::size_t nbytes) = 0;
  virtual AllocatorStats stats() const = 0;
  /// Starts a new high-water mark at the bytes in use now.
  virtual void reset_peak() {}
};

/// Host allocator with 64-byte alignment and power-of-two-ish size classes.
/// Thread-safe: a tensor may die on another thread than the one that made it.
class CachingHostAllocator final : public Allocator {
 public:
  CachingHostAllocator() = default;
  ~CachingHostAllocator() override;
  CachingHostAllocator(const CachingHostAllocator&) = delete;
  CachingHostAllocator& operator=(const CachingHostAllocator&) = delete;

  void* allocate(std::size_t nbytes) override;
  void release(void* ptr, std::size_t nbytes) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  /// Returns every cached block to the system.
  void empty_cache();

  static std::size_t size_class(std::size_t nbytes);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

}  // namespace lockstep::backend
