#pragma once
// The tensor layer's side of lockstep/tensor/host_reads.hpp: where a read is noted.
#include "backend/kernels.hpp"
#include "lockstep/core/device.hpp"

namespace lockstep::detail {

enum class HostRead { kCopyToHost, kBitwiseEqual, kCopyBetweenDevices };

/// Notes a read of `device`'s memory by the host (nothing for a CPU device).
void note_host_read(const Device& device, HostRead what);
/// Notes that kernel `op` ran on `device` (counted where its result returns to the host).
void note_kernel_host_read(const Device& device, backend::KernelOp op);

}  // namespace lockstep::detail
