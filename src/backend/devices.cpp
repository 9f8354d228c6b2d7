#include "backend/devices.hpp"

#include "backend/context.hpp"

namespace lockstep::backend {

std::string cuda_device_name(int index);  // registry.cpp: the CUDA backend's, when built

std::vector<DeviceInfo> list_local_devices() {
  std::vector<DeviceInfo> out;
  const int gpus = cuda_device_count();
  for (int i = 0; i < gpus; ++i) out.push_back({Device{DeviceKind::kCuda, i}, cuda_device_name(i)});
  out.push_back({Device{DeviceKind::kCpu, 0}, "CPU, " + std::to_string(available_cores()) + " cores"});
  return out;
}

}  // namespace lockstep::backend
