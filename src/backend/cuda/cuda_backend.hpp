#pragma once
// The CUDA backend as the registry sees it (plain C++: no CUDA header leaks out of
// src/backend/cuda). Built only with LOCKSTEP_WITH_CUDA, as the plugin liblockstep_cuda.so that
// src/backend/cuda_loader.cpp loads where a GPU is: its one entry point is lockstep_cuda_backend.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "backend/kernels.hpp"
#include "backend/staged_copy.hpp"

namespace lockstep::backend::cuda {

/// Visible CUDA devices (0 without a driver or a GPU: never an error).
int device_count();
/// "NVIDIA H200, 143771 MiB, sm_90"
std::string device_name(int index);
/// The kernels of `dtype` on a CUDA device (tables.cu).
const KernelTable& table(DType dtype);
const DeviceOps& device_ops();
/// Copies from staging blocks the caller fills (staging.cpp).
const StagedCopyOps& staged_copy_ops();
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
/// DeviceKindBackend::wait_for_queue: synchronises ctx's stream unless it is captured; never throws
/// (cuda_context.cpp).
bool wait_for_queue(ComputeContext& ctx);
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

/// The functions above, as the plugin hands them to the loader. `abi` and `size` guard against a
/// plugin of another lockstep: a change here bumps kAbi.
struct BackendApi {
  static constexpr int kAbi = 5;  // 3: DeviceOps::alloc_host_mapped; 4: staged_copy_ops; 5: wait_for_queue
  int abi = kAbi;
  std::size_t size = sizeof(BackendApi);
  int (*device_count)() = nullptr;
  std::string (*device_name)(int) = nullptr;
  const KernelTable& (*table)(DType) = nullptr;
  const DeviceOps& (*device_ops)() = nullptr;
  std::unique_ptr<ComputeContext> (*make_context)(Device, const ContextOptions&) = nullptr;
  std::string (*runtime_summary)() = nullptr;
  std::optional<double> (*utilization_percent)(int) = nullptr;
  void* (*stream_of)(ComputeContext&) = nullptr;
  std::string (*capture_refusal)() = nullptr;
  void (*begin_capture)(ComputeContext&) = nullptr;
  std::shared_ptr<void> (*end_capture)(ComputeContext&, bool) = nullptr;
  void (*replay)(ComputeContext&, void*) = nullptr;
  const StagedCopyOps& (*staged_copy_ops)() = nullptr;
  bool (*wait_for_queue)(ComputeContext&) = nullptr;
};
/// The plugin's file and its entry point's name (extern "C": a BackendApi*).
inline constexpr const char* kPluginFile = "liblockstep_cuda.so";
inline constexpr const char* kPluginEntry = "lockstep_cuda_backend";

}  // namespace lockstep::backend::cuda
