#pragma once
// Caching allocators: freed blocks go to size-class free lists and are handed out again, so a
// steady-state training step never calls the system's allocator (cudaMalloc synchronises the
// device; the host's large blocks are mmap calls). PyTorch's CUDACachingAllocator is the model,
// much simplified. One template keeps the cache, the statistics, the memory limit and
// empty_cache for every kind of memory; a Memory policy says how that memory is obtained:
//   static constexpr std::size_t kMaxBytes;              // larger requests fail at once
//   static std::size_t size_class(std::size_t nbytes);
//   void* allocate(std::size_t cls, const char** why);   // null on failure, *why its reason
//   void free(void* block, std::size_t cls);             // never throws
//   std::string out_of_memory(const OutOfMemory&) const; // the ResourceError's message
// A device's blocks are used on its one stream, so a block freed on the host may be handed out
// at once: work queued with it runs after the work that used it before (stream order).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lockstep/core/error.hpp"

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

/// What a failed allocation knows, for its message.
struct OutOfMemory {
  std::size_t asked = 0;     // bytes asked for
  std::size_t block = 0;     // its size class (== asked when too large to have one)
  const char* why = "";      // "" when the memory is full, else " (what failed)"
  std::uint64_t limit = 0;   // the allocator's limit, 0 for none
  std::uint64_t in_use = 0;  // bytes the allocator holds in tensors
};

/// "3136000000000000 bytes (2.8 PiB)": the bytes, then in the largest binary unit below them.
std::string bytes_and_units(std::uint64_t bytes);

/// Thread-safe: a tensor may die on another thread than the one that made it.
template <typename Memory>
class CachingAllocator final : public Allocator {
 public:
  /// At most `limit` bytes in use (0: no limit but the memory's).
  explicit CachingAllocator(Memory memory = Memory{}, std::uint64_t limit = 0)
      : memory_(std::move(memory)), limit_(limit) {}
  ~CachingAllocator() override { empty_cache(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// Throws ResourceError (Memory's wording) when the memory or the limit has no room, after
  /// returning the cache to the system once.
  void* allocate(std::size_t nbytes) override {
    if (nbytes > Memory::kMaxBytes) fail(nbytes, nbytes, "");
    const std::size_t cls = Memory::size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (limit_ && stats_.bytes_in_use + cls > limit_) fail_locked(nbytes, cls, " (memory limit)");
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        ++stats_.cache_hits;
        stats_.bytes_cached -= cls;
        add_in_use_locked(cls);
        return p;
      }
      add_in_use_locked(cls);  // reserved before the system call, so the limit holds across threads
    }
    const char* why = "";
    void* p = memory_.allocate(cls, &why);
    if (!p && stats().bytes_cached > 0) {
      empty_cache();  // blocks of other sizes may free enough
      p = memory_.allocate(cls, &why);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!p) {
      stats_.bytes_in_use -= cls;
      fail_locked(nbytes, cls, why);
    }
    ++stats_.system_allocations;
    return p;
  }

  void release(void* ptr, std::size_t nbytes) override {
    if (!ptr) return;
    const std::size_t cls = Memory::size_class(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    free_[cls].push_back(ptr);
    stats_.bytes_in_use -= cls;
    stats_.bytes_cached += cls;
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  /// Returns every cached block to the system.
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) memory_.free(p, cls);
    free_.clear();
    stats_.bytes_cached = 0;
  }

  static std::size_t size_class(std::size_t nbytes) { return Memory::size_class(nbytes); }

 private:
  void add_in_use_locked(std::size_t cls) {
    stats_.bytes_in_use += cls;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }
  [[noreturn]] void fail(std::size_t nbytes, std::size_t cls, const char* why) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_locked(nbytes, cls, why);
  }
  [[noreturn]] void fail_locked(std::size_t nbytes, std::size_t cls, const char* why) {
    throw ResourceError(memory_.out_of_memory(OutOfMemory{nbytes, cls, why, limit_, stats_.bytes_in_use}));
  }

  Memory memory_;
  const std::uint64_t limit_;
  mutable std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

/// Host memory: 64-byte aligned blocks in power-of-two-ish size classes, large ones coloured
/// (allocator.cpp).
struct HostMemory {
  // Past this, size_class's doubling would overflow; no machine has that much memory anyway.
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 60;
  static std::size_t size_class(std::size_t nbytes);
  void* allocate(std::size_t cls, const char** why);
  void free(void* block, std::size_t cls);
  std::string out_of_memory(const OutOfMemory& e) const;
};
using CachingHostAllocator = CachingAllocator<HostMemory>;

}  // namespace lockstep::backend
