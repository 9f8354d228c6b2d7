#include <cstdlib>

#include "core/env.hpp"
#include "distribute/worker_transport.hpp"
#include "lockstep/distribute/strategy.hpp"

namespace lockstep::distribute {

bool launched_under_mpi() {
  // Open MPI's mpirun, PMIx launchers (srun --mpi=pmix, prterun) and PMI-1/2 ones (MPICH, srun).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (env::is_set(name)) return true;
  return false;
}

double time_raw_mpi_all_reduce(const Tensor& values, int iterations) {
  LOCKSTEP_CHECK(launched_under_mpi(), "time_raw_mpi_all_reduce: this process was not launched under MPI (mpirun)");
  LOCKSTEP_CHECK(iterations >= 1, "time_raw_mpi_all_reduce: iterations must be >= 1, got ", iterations);
  std::vector<float> host = values.to(DType::kF32).to_vector<float>();
  return WorkerTransport::world().time_raw_all_reduce(host, iterations);
}

}  // namespace lockstep::distribute
