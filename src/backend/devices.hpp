#pragma once
// The device kinds the registry knows (registry.cpp: one row per kind) and what each answers
// about its devices. Nothing outside src/backend asks a backend (CUDA, ...) directly.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/context.hpp"
#include "lockstep/core/device.hpp"
#include "lockstep/core/dtype.hpp"

namespace lockstep::backend {

struct KernelTable;
struct DeviceOps;

/// One device kind as the registry sees it: its kernels, its contexts and its devices.
class DeviceKindBackend {
 public:
  virtual ~DeviceKindBackend() = default;
  /// Whether a backend for the kind is compiled in (or emulated) and has kernels.
  virtual bool available() const = 0;
  /// Devices of the kind visible (0 without the backend, a driver or a device: never an error).
  virtual int count() const = 0;
  /// Whether the devices are emulated: host memory and the CPU's kernels (LOCKSTEP_EMULATED_GPUS).
  virtual bool emulated() const { return false; }
  /// "NVIDIA H200, 143771 MiB, sm_90", "CPU, 16 cores".
  virtual std::string name(int index) const = 0;
  /// The share of the last sample period with a kernel running, in percent; none where the
  /// kind or the machine cannot say.
  virtual std::optional<double> utilization_percent(int /*index*/) const { return std::nullopt; }
  /// The kind's software stack (driver, runtime, libraries) in one line; empty where none.
  virtual std::string runtime_summary() const { return {}; }
  /// The native queue (a cudaStream_t, as void*) `ctx` computes on, for collectives that enqueue
  /// on the device (NCCL); null where work runs in order on the host.
  virtual void* stream(ComputeContext& /*ctx*/) const { return nullptr; }
  /// Waits on the host until the work queued on `ctx` so far is done, and says so; never throws.
  /// False where it cannot (the queue is being captured into a graph, the device failed or is gone
  /// at exit): that work may run later. True at once where work runs as it is called.
  virtual bool wait_for_queue(ComputeContext& /*ctx*/) const { return true; }
  /// Why the kind's devices cannot capture a step into a graph and replay it (jit_compile);
  /// empty where they can.
  virtual std::string capture_refusal() const { return "the device cannot capture a step"; }
  virtual const KernelTable& kernels(DType dtype) const = 0;
  virtual const DeviceOps& device_ops() const = 0;
  /// Throws ValueError naming the device when it does not exist or the backend is not built.
  virtual std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options) const = 0;
};

/// The registry's row for `kind`.
const DeviceKindBackend& device_kind(DeviceKind kind);
/// Every device kind, the CPU last (accelerators first, as list_local_devices and the default
/// strategy take them).
const std::vector<DeviceKind>& device_kinds();

struct DeviceInfo {
  Device device;
  std::string description;
};

/// The devices of every available kind, accelerators first; the CPU always (as cpu:0).
std::vector<DeviceInfo> list_local_devices();

}  // namespace lockstep::backend
