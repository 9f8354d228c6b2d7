#include "backend/devices.hpp"

namespace lockstep::backend {

std::vector<DeviceInfo> list_local_devices() {
  std::vector<DeviceInfo> out;
  for (DeviceKind kind : device_kinds()) {
    const DeviceKindBackend& b = device_kind(kind);
    // The logical CPU devices are the strategy's split of the one CPU.
    const int n = kind == DeviceKind::kCpu ? 1 : b.count();
    for (int i = 0; i < n; ++i) out.push_back({Device{kind, i}, b.name(i)});
  }
  return out;
}

}  // namespace lockstep::backend
