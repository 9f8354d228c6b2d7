#include <cstdlib>

#include "distribute/worker_transport.hpp"

namespace lockstep::distribute {

bool launched_under_mpi() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix, prterun) and PMI-1/2 ones (MPICH, srun).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace lockstep::distribute
