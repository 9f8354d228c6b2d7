#pragma once
// Host blocks that a device reads after the host has moved on: the pinned staging memory of
// host-to-device copies. A copy from pageable memory makes the host wait (CUDA synchronises the
// stream before it and our copy waited for the transfer too); through a pinned block the host
// only copies into the block, queues the transfer and goes on. The rule that makes it safe is
// here: a block is handed out again only once the fence recorded after its last transfer has
// passed, so the host never overwrites memory the device has yet to read. Plain C++ over a
// small interface (the CUDA backend implements it with cudaHostAlloc and events), so that the
// rule is tested without a GPU.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/staged_copy.hpp"

namespace lockstep::backend {

class StagingPool {
 public:
  /// What the pool needs from a device.
  struct Ops {
    virtual ~Ops() = default;
    /// Host memory the device can read asynchronously, or null where there is none (pinned
    /// memory is limited): the caller then copies the slow way.
    virtual void* allocate(std::size_t bytes) = 0;
    virtual void free(void* block) = 0;
    /// A fence for one block, recorded by the caller after each transfer out of it.
    virtual void* make_fence() = 0;
    /// Whether the last transfer before the fence's record is done (a fence never recorded has
    /// passed).
    virtual bool passed(void* fence) = 0;
    /// Waits until it has passed.
    virtual void wait(void* fence) = 0;
  };

  /// Blocks of at most `max_block` bytes (larger copies go in pieces), at most `capacity` bytes
  /// in all.
  StagingPool(std::unique_ptr<Ops> ops, std::size_t max_block, std::size_t capacity);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  /// A block on loan: the caller fills it, queues the transfer, records fence() and lets the
  /// lease go (destruction gives the block back).
  class Lease {
   public:
    Lease(StagingPool* pool, std::size_t index, void* host, void* fence)
        : pool_(pool), index_(index), host_(host), fence_(fence) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), index_(o.index_), host_(o.host_), fence_(o.fence_) { o.pool_ = nullptr; }
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease() {
      if (pool_) pool_->give_back(index_);
    }
    void* host() const { return host_; }
    void* fence() const { return fence_; }

   private:
    StagingPool* pool_;
    std::size_t index_;
    void* host_;
    void* fence_;
  };

  /// A block of at least `bytes` (<= max_block) whose last transfer is done. A new one while the
  /// capacity allows (after freeing idle blocks too small to serve); at the capacity, the host
  /// waits for a block of the size in use. None when there is no pinned memory to be had.
  std::optional<Lease> acquire(std::size_t bytes);
  /// acquire() as a block lent for a staged copy (staged_copy.hpp): the lease held in it, or an
  /// empty one where none can be lent. reclaim() takes the lease back out (once), to be let go
  /// after the copy recorded its fence, or at once for a block never copied from.
  StagedHost lend(std::size_t bytes) {
    std::optional<Lease> lease = acquire(bytes);
    if (!lease) return {};
    auto* held = new Lease(std::move(*lease));
    return {held->host(), held};
  }
  static std::unique_ptr<Lease> reclaim(StagedHost block) { return std::unique_ptr<Lease>(static_cast<Lease*>(block.lease)); }

  std::size_t max_block() const { return max_block_; }
  /// Bytes of blocks held, and blocks ever allocated (for tests and reports).
  std::size_t bytes_held() const;
  std::uint64_t allocations() const;

  /// The size a block for `bytes` gets: a power of two, at least 64 KiB.
  static std::size_t block_size(std::size_t bytes);

 private:
  struct Block {
    void* host = nullptr;
    std::size_t bytes = 0;
    void* fence = nullptr;
    bool on_loan = false;
  };
  void give_back(std::size_t index);

  std::unique_ptr<Ops> ops_;
  const std::size_t max_block_, capacity_;
  mutable std::mutex mu_;
  std::vector<Block> blocks_;  // freed blocks stay as empty entries (indices of leases stay valid)
  std::size_t held_ = 0;
  std::uint64_t allocations_ = 0;
  bool no_memory_ = false;  // an allocation failed: pinned memory is not to be had
};

}  // namespace lockstep::backend
