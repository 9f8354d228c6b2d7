#pragma once
// Copies beside a device's work from host memory the caller fills itself: a staging block (pinned
// on a GPU, staging_pool.hpp) is lent to the caller, who writes its data there, and the copy then
// reads it as it is, so the host copies the data once (into the block) rather than twice (into
// memory of its own, then into the block, as DeviceOps::copy_from_host_beside does). DeviceUpload
// uses it for the input path's batches, gathered straight into the block: a batch's components
// share one block, copied to the device in one transfer.
#include <cstddef>

#include "lockstep/core/device.hpp"

namespace lockstep::backend {

class ComputeContext;

/// A block lent for one copy: `host` for the caller to fill; `lease` the backend's own.
struct StagedHost {
  void* host = nullptr;
  void* lease = nullptr;
};

struct StagedCopyOps {
  /// A block of at least `bytes`, or an empty one where none can be lent now (pinned memory is
  /// limited, or `bytes` is over a block's size): the caller then copies the usual way. Any thread.
  StagedHost (*acquire)(ComputeContext&, std::size_t bytes) = nullptr;
  /// As DeviceOps::copy_from_host_beside from the block, which it takes back: the block is lent
  /// again only once this copy is done (its fence, as staging_pool.hpp's rule).
  void (*copy_beside)(ComputeContext&, void* dst, StagedHost block, std::size_t bytes, void* after) = nullptr;
  /// Takes back a block never copied from. Any thread; never throws.
  void (*release)(StagedHost block) = nullptr;
};

/// A device kind's, or null where it has none (the CPU: work runs in order, nothing is copied).
const StagedCopyOps* staged_copy_ops(DeviceKind kind);

/// The host's copy of `bytes` of host memory into a block lent by staged_copy_ops(kind), at
/// `offset` (memory the caller did not gather there itself): counted on emulated GPUs, as the
/// copies into a block that DeviceOps::copy_from_host_beside makes (emulated_staging_copies).
void fill_staged(DeviceKind kind, StagedHost block, std::size_t offset, const void* host, std::size_t bytes);

}  // namespace lockstep::backend
