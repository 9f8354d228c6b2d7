#pragma once
// Where tensors are made and computed, as the layers above the tensor layer see it. A
// backend::ComputeContext (device + allocator + pool or stream + kernel tables) is opaque
// here: strategies own them, variables keep pointers to them, and ComputeScope makes one
// current on a thread. The backend's own headers stay private to src/backend and src/tensor.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/core/device.hpp"

namespace lockstep {

namespace backend {
class ComputeContext;
}
using ComputeContext = backend::ComputeContext;

/// A context for `device` with `threads` compute threads (CPU; pinned to `cpus` when given),
/// built by the backend registry for the device's kind. A GPU context holds at most
/// `memory_limit` bytes of tensors (0: the GPU's memory), TF's logical-device memory limit.
/// Throws ValueError when that kind's backend is not built or the device does not exist.
/// (shared_ptr: its deleter is bound where the type is complete, so holders need not see it.)
std::shared_ptr<ComputeContext> make_compute_context(const Device& device, int threads = 1, std::vector<int> cpus = {},
                                                     std::uint64_t memory_limit = 0);

/// The context current on this thread (the process's default CPU context when none was set).
ComputeContext& current_compute_context();
const Device& context_device(const ComputeContext& ctx);
int context_threads(const ComputeContext& ctx);
const std::vector<int>& context_cpus(const ComputeContext& ctx);
/// The most bytes of tensor memory the context's allocator held at once since the last reset
/// (its high-water mark; cached free blocks are not counted), and the reset.
std::uint64_t context_peak_bytes(const ComputeContext& ctx);
std::uint64_t context_bytes_in_use(const ComputeContext& ctx);
void reset_context_peak_bytes(ComputeContext& ctx);
/// The utilisation of the context's GPU in percent (NVML: share of the last sample period with a
/// kernel running; shared by every context on that GPU), or none for CPU contexts and where NVML
/// is not there.
std::optional<double> context_utilization_percent(const ComputeContext& ctx);

/// Makes `ctx` current on this thread for the scope's lifetime.
class ComputeScope {
 public:
  explicit ComputeScope(ComputeContext& ctx);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  ComputeContext* previous_;
};

/// Work for the moments a CPU context's compute threads would spend waiting between two ops
/// (fit gathers the next batch so): fn(i) for every i in [0, chunks), once each, in short
/// chunks (a few microseconds: the next op waits for the threads inside one), taken by the
/// pool's idle threads with `ctx` current, and what they have not taken by finish() runs there,
/// on the calling thread. Where the context has no idle threads (one thread, a GPU) or has
/// another IdleWork out, nothing is offered and finish() runs every chunk. Destroyed unfinished,
/// it is withdrawn: chunks not started never run. It must not outlive `ctx`.
class IdleWork {
 public:
  IdleWork(ComputeContext& ctx, std::int64_t chunks, std::function<void(std::int64_t)> fn);
  ~IdleWork();
  IdleWork(const IdleWork&) = delete;
  IdleWork& operator=(const IdleWork&) = delete;
  /// Whether the pool's threads may take chunks (false: finish() does all of them).
  bool offered() const;
  /// Runs the chunks not taken yet, waits for those in flight, rethrows the first exception
  /// of any chunk. Once.
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct LocalDevice {
  Device device;
  std::string description;
};
/// The GPUs (when the CUDA backend is built and a device is present), then the CPU.
std::vector<LocalDevice> list_local_devices();
/// The GPU software stack this process runs on, in one line ("CUDA driver 13.0, runtime 13.0,
/// cuDNN 9.19.0 (built with 9.19.0), NVML: yes"); empty when lockstep is built without CUDA.
std::string gpu_runtime_summary();
/// Cores this process may use (its affinity mask).
int available_cpu_cores();

}  // namespace lockstep
