#pragma once
// How often the host has read a device's memory back: on a GPU each read makes the host wait
// for the device's queue to drain, so a training step that reads nothing keeps the GPU fed.
// Every such read goes through the tensor layer, which counts it here: copies to the host
// (Tensor::copy_to_host, to_vector, item, to(Device{}) / on_host), bitwise_equal, the kernels
// whose result returns to the host (the op list's return type is not void: first_outside,
// sum_squares), and copies between two GPUs (the host waits for both). Memory of CPU devices is
// the host's: reading it counts nothing.
// Emulated GPUs (LOCKSTEP_EMULATED_GPUS) count as real ones would. For tests and diagnostics:
// one count for the process, over every thread.
#include <cstdint>
#include <string>

namespace lockstep::detail {

/// Host reads of device memory so far in this process.
std::uint64_t host_reads();
/// Those of one cause: "copy to the host", "bitwise_equal", "copy between devices" or
/// "kernel <name>" (first_outside, ...).
std::uint64_t host_reads(const std::string& cause);
/// Every cause's: "copy to the host 3, kernel first_outside 1" ("none" when none).
std::string host_reads_by_cause();

}  // namespace lockstep::detail
