#pragma once
// The CUDA backend as the registry sees it (plain C++: no CUDA header leaks out of
// src/backend/cuda). Built only with LOCKSTEP_WITH_CUDA.
#include <memory>
#include <optional>
#include <string>

#include "backend/kernels.hpp"

namespace lockstep::backend::cuda {

/// Visible CUDA devices (0 without a driver or a GPU: never an error).
int device_count();
/// "NVIDIA H200, 143771 MiB, sm_90"
std::string device_name(int index);
/// The kernels of `dtype` on a CUDA device (tables.cu).
const KernelTable& table(DType dtype);
const DeviceOps& device_ops();
/// A context on GPU `device.index`: a caching allocator of that device (limited to
/// options.memory_limit bytes when set) and the device's stream. Throws ValueError naming the
/// device when it does not exist.
std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options);
/// The GPU software stack this process runs on, for reports: "CUDA driver 13.0, runtime 13.0,
/// cuDNN 9.19.0 (built with 9.19.0), NVML: yes". Never throws (no driver: "driver: none").
std::string runtime_summary();
/// NVML's utilisation of GPU `index` (percent of the last sample period with a kernel running),
/// or none without NVML (nvml.cpp loads it at run time) or a GPU.
std::optional<double> utilization_percent(int index);
/// The cudaStream_t a CUDA context computes on (as void*, for NCCL).
void* stream_of(ComputeContext& ctx);
/// Why work on this process's CUDA devices cannot be captured into a CUDA graph and replayed
/// (jit_compile); empty where it can (graph.cpp).
std::string capture_refusal();
/// Starts capturing the work this thread queues on ctx's stream (graph.cpp).
void begin_capture(ComputeContext& ctx);
/// Ends the capture: the instantiated graph (keep), or null after discarding it (!keep: the
/// captured work failed).
std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep);
/// Queues one run of `graph` on ctx's stream.
void replay(ComputeContext& ctx, void* graph);

}  // namespace lockstep::backend::cuda
