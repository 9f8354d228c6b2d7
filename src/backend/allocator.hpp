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
//   static constexpr bool kAllocatesInCapture;            // may allocate while a graph is captured
// A device's blocks are used on its one stream, so a block freed on the host may be handed out
// at once: work queued with it runs after the work that used it before (stream order).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
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

  // ---- a captured graph's private pool (PyTorch's graph pools; StepGraph) ----
  /// From now on what this thread allocates comes from a new pool of the graph being captured,
  /// and every block of the pool goes back to the pool when freed, never to the shared cache: a
  /// replay writes the pool's memory, so nothing outside the graph may be handed it. Returns
  /// the pool's id.
  virtual std::uint64_t begin_graph_pool() = 0;
  /// The capture is over: this thread allocates from the shared cache again; the pool keeps its
  /// blocks for the graph's replays.
  virtual void end_graph_pool() = 0;
  /// The graph is gone: the pool's free blocks go to the shared cache, and so do those still
  /// held (its outputs) when they are freed.
  virtual void release_graph_pool(std::uint64_t id) = 0;
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
      if (capturing_pool_ && std::this_thread::get_id() == capture_thread_) [[unlikely]]
        return allocate_in_pool_locked(nbytes, cls);
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
    stats_.bytes_in_use -= cls;
    stats_.bytes_cached += cls;
    if (!pool_of_.empty()) [[unlikely]] {
      const auto owned = pool_of_.find(ptr);
      if (owned != pool_of_.end()) {
        const auto pool = pools_.find(owned->second);
        if (pool != pools_.end()) {
          pool->second[cls].push_back(ptr);
          return;
        }
        pool_of_.erase(owned);  // its graph is gone: the block is the cache's again
      }
    }
    free_[cls].push_back(ptr);
  }

  std::uint64_t begin_graph_pool() override {
    std::lock_guard<std::mutex> lock(mu_);
    LOCKSTEP_CHECK(!capturing_pool_, "a graph is already being captured with this device's memory: captures do not "
                                     "nest, and one device captures one graph at a time");
    capturing_pool_ = next_pool_++;
    capture_thread_ = std::this_thread::get_id();
    pools_[capturing_pool_];
    return capturing_pool_;
  }

  void end_graph_pool() override {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_pool_ = 0;
  }

  void release_graph_pool(std::uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto pool = pools_.find(id);
    if (pool == pools_.end()) return;
    for (auto& [cls, blocks] : pool->second)
      for (void* p : blocks) {
        pool_of_.erase(p);
        free_[cls].push_back(p);
      }
    pools_.erase(pool);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  /// Returns every cached block to the system (a graph pool's stay with their graph).
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) memory_.free(p, cls);
    free_.clear();
    stats_.bytes_cached = 0;
  }

  static std::size_t size_class(std::size_t nbytes) { return Memory::size_class(nbytes); }

 private:
  using FreeLists = std::unordered_map<std::size_t, std::vector<void*>>;

  // A block for the graph being captured: from its pool, else from the shared cache, else (where
  // the memory allows it while capturing) from the system; it belongs to the pool from now on.
  void* allocate_in_pool_locked(std::size_t nbytes, std::size_t cls) {
    void* p = nullptr;
    for (FreeLists* lists : {&pools_[capturing_pool_], &free_}) {
      auto it = lists->find(cls);
      if (it == lists->end() || it->second.empty()) continue;
      p = it->second.back();
      it->second.pop_back();
      ++stats_.cache_hits;
      stats_.bytes_cached -= cls;
      break;
    }
    if (!p) {
      if (!Memory::kAllocatesInCapture)
        fail_locked(nbytes, cls, " (while a graph is captured, which cannot allocate device memory: the cache has no "
                                 "block of this size; run the step once eagerly first)");
      const char* why = "";
      p = memory_.allocate(cls, &why);
      if (!p) fail_locked(nbytes, cls, why);
      ++stats_.system_allocations;
    }
    add_in_use_locked(cls);
    pool_of_[p] = capturing_pool_;
    return p;
  }

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
  FreeLists free_;
  AllocatorStats stats_;
  // Graph pools: each live pool's free blocks, the pool of every block one owns (in use or
  // free), the pool being captured (0: none) and the thread capturing it.
  std::unordered_map<std::uint64_t, FreeLists> pools_;
  std::unordered_map<void*, std::uint64_t> pool_of_;
  std::uint64_t capturing_pool_ = 0, next_pool_ = 1;
  std::thread::id capture_thread_;
};

/// Host memory: 64-byte aligned blocks in power-of-two-ish size classes, large ones coloured
/// (allocator.cpp).
struct HostMemory {
  // Past this, size_class's doubling would overflow; no machine has that much memory anyway.
  static constexpr std::size_t kMaxBytes = std::size_t{1} << 60;
  static constexpr bool kAllocatesInCapture = true;
  static std::size_t size_class(std::size_t nbytes);
  void* allocate(std::size_t cls, const char** why);
  void free(void* block, std::size_t cls);
  std::string out_of_memory(const OutOfMemory& e) const;
};
using CachingHostAllocator = CachingAllocator<HostMemory>;

}  // namespace lockstep::backend
