// GPU utilisation from NVML, loaded at run time (dlopen of the driver's libnvidia-ml.so.1): NVML
// comes with the driver, not the toolkit, so lockstep neither links it nor needs it. Without it
// (no driver, a container without it), or when a query fails, there is simply no figure.
// The GPU is found by its PCI bus id, which NVML and CUDA agree on whatever CUDA_VISIBLE_DEVICES
// renumbers.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_device.hpp"

namespace lockstep::backend::cuda {

namespace {
// The few NVML declarations used (nvml.h: nvmlReturn_t is an enum, 0 = NVML_SUCCESS).
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;  // percent of the last sample period with a kernel running / memory busy
};
using InitFn = int (*)();
using HandleByPciFn = int (*)(const char*, NvmlDevice*);
using UtilizationFn = int (*)(NvmlDevice, NvmlUtilization*);

struct Nvml {
  HandleByPciFn handle_by_pci = nullptr;
  UtilizationFn utilization = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return r;  // kept open for the process once found
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    r.handle_by_pci = reinterpret_cast<HandleByPciFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    r.utilization = reinterpret_cast<UtilizationFn>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    r.ok = init && r.handle_by_pci && r.utilization && init() == 0;
    return r;
  }();
  return n;
}
}  // namespace

bool nvml_available() { return nvml().ok; }

std::optional<double> utilization_percent(int index) {
  if (index < 0 || index >= device_count()) return std::nullopt;
  const Nvml& n = nvml();
  if (!n.ok) return std::nullopt;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  NvmlDevice dev = nullptr;
  NvmlUtilization u{};
  if (n.handle_by_pci(bus, &dev) != 0 || n.utilization(dev, &u) != 0) return std::nullopt;
  return static_cast<double>(u.gpu);
}

}  // namespace lockstep::backend::cuda
