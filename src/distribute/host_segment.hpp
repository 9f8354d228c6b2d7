#pragma once
// Where the workers of one machine meet: a POSIX shared-memory segment that every worker of a
// multi-worker group maps. Each worker has a control line (an arrival counter and its
// collective's header) and two sets of data slots; a collective publishes into its own slot,
// passes a barrier, and then reads the other workers' slots directly. Over MPI the same bytes
// cross processes by a kernel copy per message (Open MPI's CMA, or TCP), which for the
// gradients of a small model costs several times what the reduction does (DESIGN-NOTES,
// "Workers on one machine").
//
// Failures: a barrier gives up at the collective's deadline naming the workers that never
// arrived, and sooner when a worker's process is gone (same machine: its pid is checked). The
// segment is unlinked as soon as every worker mapped it, so nothing is left in /dev/shm when
// the job ends, however it ends.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distribute/collective_call.hpp"
#include "distribute/work_queue.hpp"
#include "distribute/worker_transport.hpp"

namespace lockstep::distribute {

class HostSegment {
 public:
  /// What a worker says about the collective it is in; read by the others after a barrier.
  struct Header {
    std::uint64_t seq = 0;  // the group's collectives on this segment, counted from 1
    CollectiveSignature signature;
  };

  /// Maps the segment of the group whose messages carry `tag`: worker 0 creates it, every
  /// worker maps it, then it is unlinked. Collective over `transport` (every worker calls it
  /// alike, all on one machine: `pids` are the workers' process ids, in worker order). Returns
  /// null on every worker, with the reason in `*why`, when any worker could not map it.
  static std::unique_ptr<HostSegment> open(WorkerTransport& transport, int tag, std::size_t slot_bytes,
                                           const std::vector<std::int32_t>& pids, const Deadline& deadline,
                                           std::string* why);
  ~HostSegment();
  HostSegment(const HostSegment&) = delete;
  HostSegment& operator=(const HostSegment&) = delete;

  std::size_t slot_bytes() const { return slot_bytes_; }
  /// The set of slots the next collective uses: the two alternate, so that a worker may publish
  /// its next collective while a slower one still reads the current one (never the one after:
  /// every collective ends with a barrier that the next one's publishing follows).
  int next_set() { return static_cast<int>(collectives_++ & 1); }
  /// Worker `worker`'s slot of `set`: `numel` elements of `dtype` (at most slot_bytes()).
  Tensor slot(int set, int worker, std::int64_t numel, DType dtype) const;
  /// This worker's header for `set` (written before a barrier), or another worker's (read after).
  Header& header(int set, int worker);

  /// Announces this worker at its next barrier and waits until every worker arrived there.
  /// Throws DistributedError naming what `what()` says (asked only on the slow path: a barrier
  /// that completes builds no string) and the workers that did not arrive by `deadline`, whose
  /// process is gone, or that announced their failure (WorkerTransport::announce_failure); the
  /// segment then stays failed: every later barrier throws.
  void arrive_and_wait(const Deadline& deadline, const std::function<std::string()>& what);
  /// What the current barrier still waits for ("worker(s) 1 in all_reduce #12 (...)"), or "".
  std::string waiting_for() const;

 private:
  struct alignas(128) Line {
    std::atomic<std::uint64_t> arrivals{0};
    Header headers[2];
  };
  HostSegment(WorkerTransport& transport, void* base, std::size_t bytes, std::size_t slot_bytes, int worker,
              int workers, std::vector<std::int32_t> pids);
  Line& line(int worker) const;
  std::vector<int> missing(std::uint64_t target) const;
  std::vector<int> gone(const std::vector<int>& workers) const;

  WorkerTransport& transport_;  // polled for a failed worker's notice on the slow path
  void* base_;
  std::size_t bytes_;
  std::size_t slot_bytes_;
  std::byte* data_;
  int worker_;
  int workers_;
  std::vector<std::int32_t> pids_;  // empty: this worker cannot see the others' processes
  std::uint64_t collectives_ = 0;
  std::uint64_t arrivals_ = 0;  // this worker's barriers so far
  std::string failure_;
  mutable std::mutex waiting_mu_;
  std::string waiting_for_;
};

}  // namespace lockstep::distribute
