#include "lockstep/distribute/collective_group.hpp"

#include "backend/devices.hpp"
#include "distribute/loopback_group.hpp"
#include "distribute/multi_worker_group.hpp"
#include "distribute/nccl_group.hpp"
#include "distribute/shared_memory_group.hpp"

namespace lockstep::distribute {

const char* collective_implementation_name(CollectiveImplementation implementation) {
  switch (implementation) {
    case CollectiveImplementation::kSharedMemory: return "shared_memory";
    case CollectiveImplementation::kLoopback: return "loopback";
    case CollectiveImplementation::kMpi: return "mpi";
    case CollectiveImplementation::kNccl: return "nccl";
  }
  return "unknown";
}

std::unique_ptr<CollectiveGroup> make_collective_group(CollectiveImplementation implementation, int size,
                                                       const CollectiveOptions& options) {
  switch (implementation) {
    case CollectiveImplementation::kSharedMemory: return std::make_unique<SharedMemoryGroup>(size, options);
    case CollectiveImplementation::kLoopback: return std::make_unique<LoopbackGroup>(size, options);
    case CollectiveImplementation::kMpi:
      return std::make_unique<MultiWorkerGroup>(WorkerTransport::world(), size, options);
    case CollectiveImplementation::kNccl:
      LOCKSTEP_CHECK(!backend::device_kind(DeviceKind::kCuda).emulated(), "collectives over NCCL need real GPUs; these are emulated "
                     "(LOCKSTEP_EMULATED_GPUS), so use the shared-memory implementation");
      return make_nccl_group(size, options);
  }
  throw ValueError("make_collective_group: unknown implementation " +
                   std::to_string(static_cast<int>(implementation)));
}

}  // namespace lockstep::distribute
