#pragma once
// CollectiveImplementation::kNccl (src/distribute/nccl/nccl_group.cpp when built with NCCL,
// src/distribute/no_nccl/ otherwise, which refuses naming the build option).
#include <memory>

#include "lockstep/distribute/collective_group.hpp"

namespace lockstep::distribute {

/// Whether this build has the NCCL implementation.
bool built_with_nccl();
/// A group of `size` members, member r on GPU options.devices[r] (distinct GPUs). Throws
/// ValueError when the devices are not `size` distinct GPUs, or without NCCL.
std::unique_ptr<CollectiveGroup> make_nccl_group(int size, const CollectiveOptions& options);

}  // namespace lockstep::distribute
