// A build without NCCL: the kNccl implementation refuses, naming the build option.
#include "distribute/nccl_group.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::distribute {

bool built_with_nccl() { return false; }

std::unique_ptr<CollectiveGroup> make_nccl_group(int, const CollectiveOptions&) {
  throw ValueError("collectives over NCCL: this lockstep was built without NCCL (LOCKSTEP_WITH_NCCL=OFF, or no "
                   "CUDA); use shared_memory");
}

}  // namespace lockstep::distribute
