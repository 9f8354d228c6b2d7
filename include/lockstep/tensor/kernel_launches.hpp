#pragma once
// How many kernels each device has run, by kernel: on a GPU each launch costs a few microseconds
// of the device's time however small its work, so a training step's count of launches is what
// fusing kernels cuts. Every kernel goes through the tensor layer, which counts it here, per
// device (kind and index; indices past 31 share the last count) and per kernel of the op list
// (src/backend/kernel_ops.def). A replay of a captured step (StepGraph, jit_compile) counts the
// kernels its capture recorded, as if they ran again. Device copies and collectives are not
// kernels of the op list and count nothing. Emulated GPUs (LOCKSTEP_EMULATED_GPUS) count as real
// ones would. For tests, benches and diagnostics: one count for the process, over every thread
// (each thread counts its own launches, summed when read: a launch writes no shared memory).
#include <cstdint>
#include <string>

#include "lockstep/core/device.hpp"

namespace lockstep::detail {

/// Kernels run on `device` so far in this process.
std::uint64_t kernel_launches(const Device& device);
/// Those of one kernel (its op-list name: "gemm", "adam_update", ...).
std::uint64_t kernel_launches(const Device& device, const std::string& kernel);
/// Every kernel's on `device`, most first: "gemm 6, bias_activation 2" ("none" when none).
std::string kernel_launches_by_kernel(const Device& device);
/// Step graphs (StepGraph: jit_compile's) captured on `device` so far in this process, one per
/// graph however many lanes it has: each capture is a step queued at eager speed and a graph
/// kept, which steady training captures once per signature.
std::uint64_t step_captures(const Device& device);

}  // namespace lockstep::detail
