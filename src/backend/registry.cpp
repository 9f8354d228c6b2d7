// The one place that knows which backends exist.
#include "backend/cpu/cpu_kernels.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend {

const KernelTable& kernels(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return cpu::table();
    case DeviceKind::kCuda:
      throw ValueError("no CUDA kernels are built into this lockstep: tensors on gpu devices are not supported yet");
  }
  throw InternalError("unknown device kind");
}

}  // namespace lockstep::backend
