#include "backend/staging_pool.hpp"

#include <algorithm>

namespace lockstep::backend {

namespace {
constexpr std::size_t kNone = static_cast<std::size_t>(-1);
constexpr std::size_t kSmallestBlock = std::size_t{64} << 10;
}  // namespace

StagingPool::StagingPool(std::unique_ptr<Ops> ops, std::size_t max_block, std::size_t capacity)
    : ops_(std::move(ops)), max_block_(max_block), capacity_(std::max(capacity, block_size(max_block))) {}

StagingPool::~StagingPool() {
  for (Block& b : blocks_) {
    if (!b.host) continue;
    ops_->wait(b.fence);  // the device may still read it
    ops_->free(b.host);
  }
}

std::size_t StagingPool::block_size(std::size_t bytes) {
  std::size_t s = kSmallestBlock;
  while (s < bytes) s <<= 1;
  return s;
}

std::optional<StagingPool::Lease> StagingPool::acquire(std::size_t bytes) {
  if (bytes == 0 || bytes > max_block_) return std::nullopt;
  const std::size_t size = block_size(bytes);
  std::unique_lock<std::mutex> lock(mu_);
  const auto idle_fit = [&](const Block& b) { return b.host && !b.on_loan && b.bytes >= bytes; };
  const auto lend = [&](std::size_t i) {
    blocks_[i].on_loan = true;
    return Lease(this, i, blocks_[i].host, blocks_[i].fence);
  };
  // The smallest idle block that fits and that the device has finished reading; one of `size`
  // (the smallest that can fit) ends the search, so that a step's copy asks the device about
  // one or two fences rather than every block the pool holds.
  std::size_t best = kNone;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (!idle_fit(blocks_[i]) || (best != kNone && blocks_[i].bytes >= blocks_[best].bytes)) continue;
    if (!ops_->passed(blocks_[i].fence)) continue;
    best = i;
    if (blocks_[i].bytes == size) break;
  }
  if (best != kNone) return lend(best);
  if (!no_memory_) {
    // Over the capacity, idle blocks too small for this request make room (they would otherwise
    // keep every larger copy on the slow path).
    if (held_ + size > capacity_) {
      for (Block& b : blocks_) {
        if (!b.host || b.on_loan || b.bytes >= bytes || !ops_->passed(b.fence)) continue;
        ops_->free(b.host);
        held_ -= b.bytes;
        b.host = nullptr;
        b.bytes = 0;
      }
    }
    if (held_ + size <= capacity_) {
      void* p = ops_->allocate(size);
      if (p) {
        std::size_t i = 0;
        while (i < blocks_.size() && blocks_[i].host) ++i;
        if (i == blocks_.size()) blocks_.push_back(Block{nullptr, 0, ops_->make_fence(), false});
        blocks_[i].host = p;
        blocks_[i].bytes = size;
        held_ += size;
        ++allocations_;
        return lend(i);
      }
      no_memory_ = true;  // and from now on the blocks held are all there is
    }
  }
  // At the capacity: wait for the device to finish reading an idle block that fits.
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    if (!idle_fit(blocks_[i])) continue;
    Lease lease = lend(i);
    lock.unlock();
    ops_->wait(lease.fence());
    return lease;
  }
  return std::nullopt;  // every block that fits is on loan, or none fits: the slow way
}

void StagingPool::give_back(std::size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  blocks_[index].on_loan = false;
}

std::size_t StagingPool::bytes_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

std::uint64_t StagingPool::allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_;
}

}  // namespace lockstep::backend
