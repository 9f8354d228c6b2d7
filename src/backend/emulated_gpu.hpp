#pragma once
// What emulated GPUs (LOCKSTEP_EMULATED_GPUS, registry.cpp) let a test check of the device
// ordering they cannot run: their fences pass at once, but each one is counted.
#include <cstdint>

namespace lockstep::backend {

/// Fences recorded on emulated GPUs and not yet consumed (by wait_fence or copy_from_host_beside):
/// a fence that nobody waits for, or one consumed twice, shows here.
std::int64_t emulated_fences_pending();

}  // namespace lockstep::backend
