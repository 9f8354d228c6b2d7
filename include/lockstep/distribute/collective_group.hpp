#pragma once
// CollectiveGroup: the N communicators of one group that live in this process, made by one
// implementation. A strategy holds one group (member r = replica r) and knows only this
// interface and Communicator; a process may hold several groups.
//
//   auto group = make_collective_group(CollectiveImplementation::kSharedMemory, 2);
//   // on thread r:
//   Tensor t = ...;
//   WorkPtr w = group->member(r).all_reduce(t, ReduceOp::kSum);
//   ...                                   // the collective runs meanwhile
//   w->wait();                            // t holds the sum
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/device.hpp"

#include "lockstep/distribute/communicator.hpp"

namespace lockstep::distribute {

/// How the members exchange data (the analogue of tf.distribute's cross_device_ops). Both give
/// bit-identical results: the same chunks, combined in the same member order.
enum class CollectiveImplementation {
  /// In-process shared memory: each member reduces its cache-line-aligned chunk of every
  /// member's tensor and writes the result into every member's tensor (reduce-scatter fused
  /// with all-gather; two barriers per collective).
  kSharedMemory,
  /// Members exchange serialized byte buffers through per-(sender, receiver) mailboxes, as a
  /// network transport would; no member reads another's tensor. For tests: it runs the
  /// protocol a multi-process implementation needs, in one process.
  kLoopback,
  /// Members in several processes, the workers of an MPI job (mpirun -np W), `size` of them
  /// in each: hierarchical (local members in shared memory, then across workers over MPI;
  /// MultiWorkerMirroredStrategy). Communicator::rank() is worker * size + local member and
  /// size() is W * size; results are bit-identical run to run, and to one process's group of
  /// W * size members when size == 1 (or W == 1) and for max, min and integer sums in any
  /// layout. Needs a build with MPI (LOCKSTEP_WITH_MPI) and every worker making its groups in
  /// the same order with the same size.
  kMpi,
  /// One member per GPU of this machine, over NCCL (ncclCommInitAll; CollectiveOptions::devices
  /// names each member's GPU, all different: NCCL refuses two ranks on one GPU). Collectives are
  /// enqueued on each member's stream after the members agree on the signature (as every
  /// implementation does); a Work completes when the device has finished it, and a wait past
  /// the timeout aborts the communicators (ncclCommAbort). Members' tensors must be on their
  /// GPUs. Results are identical on every member; kMean is NCCL's ncclAvg. Needs a build with
  /// NCCL (LOCKSTEP_WITH_NCCL).
  kNccl,
};

/// "shared_memory", "loopback", "mpi", "nccl"
const char* collective_implementation_name(CollectiveImplementation implementation);

struct CollectiveOptions {
  /// How long a member waits for a peer inside a collective, and Work::wait()'s default.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// Member r's device (devices[r]): kNccl's GPUs; the shared-memory groups order the device work
  /// of members on one GPU at their barriers (their streams may differ); else ignored. Empty: none.
  std::vector<Device> devices;
};

class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;

  virtual int size() const = 0;
  /// Member `rank`'s communicator; one thread at a time starts its collectives.
  virtual Communicator& member(int rank) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual CollectiveImplementation implementation() const = 0;

  /// True from a member's abort (or timeout) until reset().
  virtual bool failed() const = 0;
  /// What failed the group (the first failure's message), or empty while it has not failed.
  virtual std::string failure() const = 0;
  /// Makes a failed group usable again: waits (up to the timeout) until every member's pending
  /// collectives have failed, then clears the failure and puts the members back in step. Call
  /// it only while no member starts collectives. A healthy group is left as it is (cheap).
  /// Throws DistributedError when a member still runs a collective after the timeout.
  virtual void reset() = 0;
};

/// A group of `size` members (>= 1) in this process (kMpi: in each worker process).
std::unique_ptr<CollectiveGroup> make_collective_group(CollectiveImplementation implementation, int size,
                                                       const CollectiveOptions& options = {});

}  // namespace lockstep::distribute
