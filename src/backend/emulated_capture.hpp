#pragma once
// Graph capture on emulated GPUs (LOCKSTEP_EMULATED_GPUS): what CUDA's stream capture does, on
// host memory with the CPU's kernels, so that CI tests everything of jit_compile but the CUDA
// calls. While a thread captures a context, the kernels and device copies it queues there are
// recorded (each a closure holding its arguments by value, descriptors copied, and the CPU
// kernel) instead of run; a replay runs the closures in order. What CUDA's capture would refuse
// fails here too, by name: a kernel that returns its result to the host, a copy between the host
// and the device, a byte comparison read on the host.
#include <cstdint>
#include <memory>

#include "backend/kernels.hpp"

namespace lockstep::backend::emulated {

/// The emulated GPUs' kernels of `dtype`: the CPU's, each recorded instead of run while its
/// context is being captured on the calling thread.
const KernelTable& kernels(DType dtype);
/// `base` (the emulated device's memory work) with device copies and fills recorded likewise,
/// and the host's copies refused while capturing.
DeviceOps capturing_ops(const DeviceOps& base);

/// Why a kernel cannot be recorded on emulated GPUs (null where it can): an argument that is a
/// host array of pointers (combine's, the summed updates') which the recording cannot keep.
const char* kernel_refusal(KernelOp op);

void begin_capture(ComputeContext& ctx);
std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep);
void replay(ComputeContext& ctx, void* graph);
/// Replays run so far in this process, on every thread (tests: that a step was replayed).
std::uint64_t replays();

}  // namespace lockstep::backend::emulated
