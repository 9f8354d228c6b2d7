// A build with NCCL: the kNccl implementation lives in the plugin liblockstep_nccl.so
// (src/distribute/nccl/nccl_group.cpp, with NCCL and the CUDA runtime), loaded when a group is
// made; the members' devices are checked here first, so a wrong request loads nothing.
#include "backend/devices.hpp"
#include "backend/plugin.hpp"
#include "distribute/nccl_group.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::distribute {

bool built_with_nccl() { return true; }

std::unique_ptr<CollectiveGroup> make_nccl_group(int size, const CollectiveOptions& options) {
  LOCKSTEP_CHECK(size >= 1 && static_cast<int>(options.devices.size()) == size,
                 "collectives over NCCL: ", size, " members need ", size, " devices in CollectiveOptions::devices, got ",
                 options.devices.size());
  const int gpus = backend::device_kind(DeviceKind::kCuda).count();
  for (int r = 0; r < size; ++r) {
    const Device& d = options.devices[static_cast<std::size_t>(r)];
    LOCKSTEP_CHECK(d.kind == DeviceKind::kCuda && d.index >= 0 && d.index < gpus, "collectives over NCCL: member ", r,
                   "'s device ", d.str(), " is not one of this machine's ", gpus, " GPU(s)");
    for (int q = 0; q < r; ++q)
      LOCKSTEP_CHECK(!(options.devices[static_cast<std::size_t>(q)] == d), "collectives over NCCL: members ", q, " and ",
                     r, " are both on ", d.str(),
                     "; NCCL cannot have two ranks on one GPU (replicas sharing a GPU use shared_memory)");
  }
  using Make = CollectiveGroup* (*)(int, const CollectiveOptions&);
  const auto make = reinterpret_cast<Make>(backend::plugin_symbol(kNcclPluginFile, kNcclPluginEntry));
  return std::unique_ptr<CollectiveGroup>(make(size, options));
}

}  // namespace lockstep::distribute
