// Built without MPI: no transport to other workers.
#include "distribute/worker_transport.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::distribute {

bool built_with_mpi() { return false; }

WorkerTransport& WorkerTransport::world() {
  throw ValueError("lockstep was built without MPI (LOCKSTEP_WITH_MPI=OFF): no collectives across workers; install "
                   "libopenmpi-dev and rebuild");
}

}  // namespace lockstep::distribute
