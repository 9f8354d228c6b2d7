#pragma once
#include <string>

namespace lockstep {

enum class DeviceKind { kCpu, kCuda };

/// A device as users name it: "cpu:0", "gpu:1". On a CPU-only machine the local
/// devices are logical CPU devices, each owning its share of the cores.
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  /// Parses "cpu", "cpu:3", "gpu:0", "cuda:0"; throws ValueError on anything else.
  static Device parse(const std::string& s);
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace lockstep
