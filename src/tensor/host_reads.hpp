#pragma once
// The tensor layer's side of lockstep/tensor/host_reads.hpp: where a read is noted.
#include "backend/kernels.hpp"
#include "lockstep/core/device.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::detail {

enum class HostRead { kCopyToHost, kBitwiseEqual };

/// Notes a read of `device`'s memory by the host (nothing for a CPU device).
void note_host_read(const Device& device, HostRead what);
/// Notes that kernel `op` ran on `device` (counted where its result returns to the host).
void note_kernel_host_read(const Device& device, backend::KernelOp op);

/// The input path copied `host` into `device_copy` (the whole of its memory): for an integer
/// tensor on a device, those host bytes are kept beside it, so that labels in it are checked on
/// the host (checked_labels) until the tensor layer writes to it in place (forget_host_copy).
/// Only for host memory nothing writes to afterwards (a batch gathered for the copy).
void remember_host_copy(const Tensor& device_copy, const Tensor& host);
/// The host bytes of `t` while they are still its values; else null.
const void* host_copy_of(const Tensor& t);
/// `t`'s memory is about to be written in place: its host bytes no longer hold.
void forget_host_copy(const Tensor& t);

}  // namespace lockstep::detail
