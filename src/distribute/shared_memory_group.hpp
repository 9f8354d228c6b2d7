#pragma once
// CollectiveImplementation::kSharedMemory: members publish their tensors in the group and
// compute on each other's tensors through the tensor layer (reduce_across, copy_from).
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "distribute/group_base.hpp"

namespace lockstep::distribute {

class SharedMemoryGroup : public GroupBase {
 public:
  SharedMemoryGroup(int size, const CollectiveOptions& options);
  ~SharedMemoryGroup() override;

 protected:
  /// For groups whose local members meet here and reach other processes' members through a
  /// transport of their own (MpiGroup).
  SharedMemoryGroup(CollectiveImplementation implementation, int size, const CollectiveOptions& options,
                    int world_size, int first_rank);
  void run(int rank, const CollectiveCall& call, const Deadline& deadline) override;
  void wake_transport() override;
  void reset_transport() override;

  /// A barrier over the members that spins briefly, then sleeps: peers on other cores arrive
  /// within microseconds, but a spinning waiter on an oversubscribed machine steals the core
  /// its peer needs (DESIGN-NOTES). On the device too: the work each member queued before it
  /// runs before the work any member of its GPU queues after it (device fences, no host wait),
  /// so logical replicas of one GPU on streams of their own read each other's tensors safely.
  void arrive_and_wait(int rank, const CollectiveCall& call, const Deadline& deadline);
  /// The host part of arrive_and_wait.
  void arrive_and_wait_host(int rank, const CollectiveCall& call, const Deadline& deadline);
  [[noreturn]] void throw_mismatch(int rank, const CollectiveCall& call, int parity, const Deadline& deadline);
  /// Publishes this member's signature (and input, when `publish_input`), waits for every
  /// member, and throws the mismatch error when they disagree (the group stays usable).
  void agree(int rank, const CollectiveCall& call, const Deadline& deadline, bool publish_input);

  // What each member published for its current collective (its signature and input), indexed
  // [seq % 2][member]: a member may publish its next collective's while a slow peer still
  // reads the current one's (a barrier has no second barrier to hold it back), never the one
  // after. Outputs need no slot: a member writes other members' tensors only in all_reduce,
  // where they are the inputs.
  std::vector<CollectiveSignature> signatures_[2];
  std::vector<Tensor> inputs_[2];

 private:
  // Sense-reversing barrier state.
  std::atomic<int> arrived_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> member_generation_;  // the generation each member last arrived in
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  // Device fences of the barrier: peers_[r] are the other members on member r's GPU (from
  // CollectiveOptions::devices; none on CPUs or without devices, whose work runs in order);
  // fences_[parity of the barrier's generation][from * size() + to] is a fence `from` recorded
  // before it arrived, which `to` waits for once the barrier opened (each consumed once). Two
  // slots: `from` records its next barrier's fences while `to` may not have waited on these yet.
  std::vector<std::vector<int>> peers_;
  std::vector<void*> fences_[2];
};

}  // namespace lockstep::distribute
