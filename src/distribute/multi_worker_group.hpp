#pragma once
// CollectiveImplementation::kMpi: a group whose members live in several processes (workers,
// the ranks of an MPI job), each with the same number of local members. Collectives are
// hierarchical: the local members meet in shared memory (SharedMemoryGroup's barrier and
// slots) and combine their tensors in member order; local member 0 then runs the cross-worker
// step over WorkerTransport, combining in worker order; the local members copy the result.
// So element i of an all-reduce is (x[w0,0] + ... + x[w0,D-1]) + ... over workers in order:
// bit-identical run to run, and to one process of W*D members when D == 1 or W == 1 (the
// same left fold); max, min and integer sums are bit-identical in every layout.
//
// When every worker runs on this machine, local member 0 meets the other workers in a
// shared-memory segment (HostSegment) instead of through MPI's messages: the signature check and
// the data take one barrier (two for all_reduce), and each worker reduces its chunk straight from
// the others' slots. The fold and the chunks are the same, so the bits are too. Collectives larger
// than a slot agree there and move their data over MPI. LOCKSTEP_WORKER_SHM=0 turns the segment
// off (the path that workers on several machines take, for tests over TCP).
#include <memory>
#include <string>

#include "distribute/host_segment.hpp"
#include "distribute/shared_memory_group.hpp"
#include "distribute/worker_transport.hpp"

namespace lockstep::distribute {

class MultiWorkerGroup final : public SharedMemoryGroup {
 public:
  /// `local_size` members here; every worker must make its groups in the same order with the
  /// same local size (checked: the constructor exchanges them, within the timeout).
  MultiWorkerGroup(WorkerTransport& transport, int local_size, const CollectiveOptions& options);
  ~MultiWorkerGroup() override;

  int worker() const { return worker_; }
  int workers() const { return workers_; }
  /// True when the workers meet in shared memory (all on this machine, LOCKSTEP_WORKER_SHM not 0);
  /// `shared_memory_note()` says why not otherwise.
  bool uses_shared_memory() const { return host_ != nullptr; }
  const std::string& shared_memory_note() const { return host_note_; }
  /// A slot's bytes: collectives up to this size per worker move through shared memory (4 MiB,
  /// or LOCKSTEP_WORKER_SHM_SLOT_MIB; a segment holds two slots per worker). Throws ValueError
  /// naming a setting that is not a whole number of MiB in [1, 65536].
  static std::size_t slot_bytes();

 protected:
  void run(int rank, const CollectiveCall& call, const Deadline& deadline) override;
  std::string stall_detail() const override;

 private:
  using Bytes = WorkerTransport::Bytes;
  using Transfer = WorkerTransport::Transfer;

  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, const CollectiveCall& call,
                const Deadline& deadline);
  /// Local member 0's part: everything that crosses workers. Throws DistributedError.
  void cross_workers(const CollectiveCall& call, const Deadline& deadline, const Tensor& buffer, int broadcast_source);
  void check_signatures(const CollectiveCall& call, const Deadline& deadline);
  /// The workers' headers, in worker order, must all equal worker 0's; else the disagreement error.
  static void check_headers(const CollectiveCall& call, const std::vector<HostSegment::Header>& headers);
  /// The cross-worker step in shared memory. Returns false when the data is larger than a slot:
  /// then only the signatures were checked, and the data goes over MPI.
  bool cross_workers_on_host(const CollectiveCall& call, const Deadline& deadline, Tensor& buffer, ReduceOp op,
                             bool divide_after);
  /// Worker j combines everyone's elements ranges[j] of `t` (in worker order) into its own t.
  void reduce_ranges(Tensor& t, ReduceOp op, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges,
                     const CollectiveCall& call, const Deadline& deadline);
  /// Every worker's elements ranges[j] of `t` become worker j's.
  void gather_ranges(Tensor& t, const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges,
                     const CollectiveCall& call, const Deadline& deadline);

  WorkerTransport& transport_;
  const int worker_;
  const int workers_;
  const int tag_;  // this group's messages, apart from other groups'
  // Published by local member 0 for the others (read after a barrier).
  Tensor scratch_;
  std::vector<Tensor> outputs_[2];
  std::string cross_error_;
  std::unique_ptr<HostSegment> host_;  // used by local member 0 only
  std::string host_note_;
};

}  // namespace lockstep::distribute
