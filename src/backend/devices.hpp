#pragma once
// Enumeration of the machine's devices.
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/device.hpp"

namespace lockstep::backend {

struct DeviceInfo {
  Device device;
  std::string description;
};

/// GPUs when the CUDA backend is built and a device is present; the CPU always.
std::vector<DeviceInfo> list_local_devices();
/// Number of CUDA devices visible (0 without the CUDA backend, a driver or a GPU), or the emulated
/// ones (LOCKSTEP_EMULATED_GPUS=N where none is visible: host memory and the CPU's kernels, for
/// testing the device boundary; registry.cpp).
int cuda_device_count();
/// Whether gpu:N are emulated (LOCKSTEP_EMULATED_GPUS).
bool gpus_emulated();
/// The GPU software stack (driver, runtime, cuDNN, NVML) in one line; empty without the CUDA backend.
std::string cuda_runtime_summary();
/// NVML's utilisation of CUDA device `index` in percent; none without the CUDA backend, NVML
/// or the device.
std::optional<double> cuda_utilization_percent(int index);
class ComputeContext;
/// The cudaStream_t (as void*) a CUDA context computes on; null for other contexts or without
/// the CUDA backend. For collectives that enqueue on the device (NCCL).
void* cuda_stream(ComputeContext& ctx);

}  // namespace lockstep::backend
