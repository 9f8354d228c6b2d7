#pragma once
// CollectiveImplementation::kNccl (src/distribute/nccl/nccl_group.cpp when built with NCCL: the
// plugin liblockstep_nccl.so that nccl_plugin/nccl_loader.cpp loads; src/distribute/no_nccl/
// otherwise, which refuses naming the build option).
#include <memory>

#include "lockstep/distribute/collective_group.hpp"

namespace lockstep::distribute {

/// Whether this build has the NCCL implementation.
bool built_with_nccl();
/// A group of `size` members, member r on GPU options.devices[r] (distinct GPUs). Throws
/// ValueError when the devices are not `size` distinct GPUs, or without NCCL.
std::unique_ptr<CollectiveGroup> make_nccl_group(int size, const CollectiveOptions& options);

/// The plugin's file and its entry point (extern "C": the group, the caller's to delete, made
/// from checked arguments).
inline constexpr const char* kNcclPluginFile = "liblockstep_nccl.so";
inline constexpr const char* kNcclPluginEntry = "lockstep_nccl_group";

}  // namespace lockstep::distribute
