#pragma once
// The other processes of a multi-worker job (MPI ranks = workers), seen as byte transfers.
// lockstep calls MPI from one thread only (MPI_THREAD_FUNNELED): the transport's progress
// thread initializes MPI at first use, starts the transfers of one exchange at a time with
// non-blocking calls and polls them against a deadline, so that a peer that died or stalled
// becomes an error naming it instead of a hang. Built without MPI, world() throws.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::distribute {

/// True when the environment says an MPI launcher started this process (OMPI_COMM_WORLD_SIZE,
/// PMIX_RANK, PMI_SIZE), whether or not lockstep was built with MPI.
bool launched_under_mpi();
/// True when lockstep was built with MPI (LOCKSTEP_WITH_MPI).
bool built_with_mpi();

class WorkerTransport {
 public:
  using Bytes = std::vector<std::byte>;
  /// One message to or from `peer`: `size` bytes at `data`, host memory that `keep` keeps
  /// alive (a Bytes buffer, or a host tensor's storage, so that messages go straight from and
  /// into tensors without a staging copy). After a failed exchange, transfers that MPI may
  /// still be writing hold on to `keep` until the process ends.
  struct Transfer {
    int peer = 0;
    std::byte* data = nullptr;
    std::size_t size = 0;
    std::shared_ptr<const void> keep;

    /// A message in a fresh (or given) byte buffer.
    static Transfer of(int peer, std::shared_ptr<Bytes> bytes) {
      Transfer t{peer, bytes->data(), bytes->size(), nullptr};
      t.keep = std::move(bytes);
      return t;
    }
  };

  /// The job's transport (MPI_COMM_WORLD), started at the first call; MPI ends when the process
  /// does: MPI_Finalize, or MPI_Abort once an exchange failed (the job cannot go on in step).
  static WorkerTransport& world();

  virtual ~WorkerTransport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Starts every send and receive (tag: what the group uses to keep its messages apart), and
  /// returns once all completed. Receives must be sized to their messages. Throws
  /// DistributedError naming `what` and the workers whose messages had not arrived when
  /// `deadline` passed (`timeout` is how long that was), or whose connection failed; the
  /// transport then stays failed: every later exchange throws at once.
  virtual void exchange(int tag, const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                        std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout,
                        const std::string& what) = 0;
  /// Sends `mine` to every other worker and returns every worker's bytes, in worker order (this
  /// worker's own at its index). Every worker calls it alike, with as many bytes. Throws as
  /// exchange() does.
  std::vector<Bytes> all_to_all(int tag, const Bytes& mine, std::chrono::steady_clock::time_point deadline,
                                std::chrono::milliseconds timeout, const std::string& what) {
    std::vector<Transfer> sends, receives;
    auto own = std::make_shared<Bytes>(mine);
    std::vector<std::shared_ptr<Bytes>> theirs(static_cast<std::size_t>(size()));
    for (int j = 0; j < size(); ++j) {
      if (j == rank()) continue;
      sends.push_back(Transfer::of(j, own));
      theirs[static_cast<std::size_t>(j)] = std::make_shared<Bytes>(mine.size());
      receives.push_back(Transfer::of(j, theirs[static_cast<std::size_t>(j)]));
    }
    if (!sends.empty()) exchange(tag, sends, receives, deadline, timeout, what);
    std::vector<Bytes> all(static_cast<std::size_t>(size()));
    for (int j = 0; j < size(); ++j)
      all[static_cast<std::size_t>(j)] = j == rank() ? mine : *theirs[static_cast<std::size_t>(j)];
    return all;
  }
  /// Why the transport failed; empty while it is healthy.
  virtual std::string failure() const = 0;
  /// The job cannot go on in step (a worker on this machine died or stalled in shared memory):
  /// the transport fails with `why` as if an exchange had, so later exchanges throw and MPI
  /// aborts at exit instead of waiting for the lost worker.
  virtual void abandon(const std::string& why) = 0;
  /// This worker failed with `why`: sends it to every other worker (waiting at most a few
  /// seconds for the messages to leave), then fails as abandon() does, so that MPI aborts the
  /// job at exit. A peer's exchange in progress or next then throws DistributedError saying
  /// "worker N failed: why". Throws DistributedError where the transport failed already.
  virtual void announce_failure(const std::string& why) = 0;
  /// A failure another worker announced ("worker N failed: why"), polled without blocking; ""
  /// when none arrived, or when MPI cannot be called from this thread now (the exchanges poll
  /// it themselves). For waits outside the transport (the shared-memory barriers).
  virtual std::string peer_failure() = 0;
  /// What the current exchange still waits for ("worker(s) 1 in all_reduce #12"), or "".
  virtual std::string waiting_for() const = 0;
  /// For benchmarks: seconds per MPI_Allreduce (sum, in place) of `data` over every worker, the
  /// slowest worker's mean over `iterations` after a warm-up. Every worker must call it alike.
  virtual double time_raw_all_reduce(std::vector<float>& data, int iterations) = 0;
};

}  // namespace lockstep::distribute
