#pragma once
// The optimizer update of a strategy's replicas, as one object (Horovod's DistributedOptimizer
// wraps the optimizer; this wraps its elementwise rule): the gradient exchange, and ZeRO stage 1
// where it applies. It owns
//   - the exchange: bucketed all-reduce (GradientReducer, one per replica), or the
//     reduce-scatter + all-gather of a sharded update; one process's replicas instead read each
//     other's gradients where they lie and write every copy within the update (the fused
//     `*_summed` kernels), bit-identical to the collectives;
//   - the layout: which replica updates which range of each variable (the reduce-scatter's);
//   - the slot shards: across workers each holds only its ranges of the shared slots until
//     gather_slots (ShardedSlots: a save asks, and an unsharded exchange refuses them);
//   - gradient accumulation's held-back sums (no_sync).
// The optimizer is asked only for its rule (ElementwiseRule), and keeps no distributed state.
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/distribute/collective_group.hpp"
#include "lockstep/distribute/gradient_accumulator.hpp"
#include "lockstep/distribute/gradient_reducer.hpp"

namespace lockstep::distribute {

struct ShardedUpdateOptions {
  int num_local_replicas = 1;
  int num_workers = 1;
  int worker_index = 0;
  std::size_t bucket_cap_bytes = GradientReducer::kDefaultBucketCapBytes;
  /// The strategy shards the update (MirroredOptions::shard_optimizer_update, where it applies).
  bool shard = false;
  /// A sharded update reads the local replicas' gradients where they lie (one worker only).
  bool gradients_in_place = false;
  /// Buckets start during the backward pass (begin).
  bool overlap = true;
};

class ShardedUpdate final : public ShardedSlots {
 public:
  /// `group`: the strategy's, member r being local replica r; it must outlive this.
  ShardedUpdate(CollectiveGroup& group, const ShardedUpdateOptions& options);
  ~ShardedUpdate() override;
  ShardedUpdate(const ShardedUpdate&) = delete;
  ShardedUpdate& operator=(const ShardedUpdate&) = delete;

  /// What the strategy allows: sharding on, and every variable float32 and mirrored over the
  /// local replicas. An update is sharded when this holds and the optimizer has an elementwise
  /// rule.
  bool allows(const std::vector<Variable>& vars) const;
  /// ReplicaInterface::begin_gradient_exchange for local replica `replica`.
  GradientReadyFn begin(int replica, const std::vector<Variable>& vars, const ElementwiseRule* rule);
  /// ReplicaInterface::exchange_gradients for local replica `replica`.
  GradientsExchanged exchange(int replica, std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                              ElementwiseRule* rule, std::int64_t step);
  /// Drops an exchange that local replica `replica` began and did not finish.
  void abandon(int replica) { reducers_[static_cast<std::size_t>(replica)]->abandon(); }

  /// Whether a sharded update over several workers left some slots in shards here.
  bool slots_partial() const;
  /// On every local replica of every worker (inside strategy.run): all-gathers `rule`'s shared
  /// slots of the variables of the last sharded update, so that every worker holds them whole.
  void gather_slots(int replica, ElementwiseRule& rule);
  bool only_shards_here(const Variable& var) const override;

  /// PyTorch DDP's no_sync, per local replica: exchange() holds the gradients back.
  bool no_sync(int replica) const { return no_sync_[static_cast<std::size_t>(replica)] != 0; }
  void set_no_sync(int replica, bool on) { no_sync_[static_cast<std::size_t>(replica)] = on ? 1 : 0; }
  /// Drops the sums no_sync held back (a group that will not be applied).
  void drop_held_back() { held_back_.clear(); }
  /// Whether no_sync holds sums back that the next exchange adds.
  bool holds_back() const { return !held_back_.empty(); }
  /// The sums no_sync holds back (fit keeps their host state right around replayed steps).
  GradientAccumulator& held_back() { return held_back_; }
  const GradientReducer& reducer(int replica) const { return *reducers_[static_cast<std::size_t>(replica)]; }

 private:
  bool sharded(const std::vector<Variable>& vars, const ElementwiseRule* rule) const {
    return rule != nullptr && allows(vars);
  }
  /// The ranges of `vars` that `replica` updates, with every local replica's gradients read in
  /// place and the other copies to write (GradientShard::grads, ::copies).
  void read_in_place(int replica, const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                     std::vector<GradientShard>& shards);
  /// After `replica` updated `shards`: every replica's shards into every copy.
  void all_gather_shards(int replica, const std::vector<Variable>& vars, const std::vector<GradientShard>& shards);
  /// Across workers: `state` (one tensor per variable of the last sharded update, shared by this
  /// worker's replicas) gets every worker's shards.
  void all_gather_shared_state(int replica, std::vector<Tensor>& state);
  void mark_partial(const std::vector<Variable>& vars);
  /// Before an unsharded update: refuses variables whose slots are held in shards here.
  void check_whole(const std::vector<Variable>& vars) const;

  CollectiveGroup& group_;
  ShardedUpdateOptions options_;
  std::vector<std::unique_ptr<GradientReducer>> reducers_;  // one per replica: no sharing between threads
  GradientAccumulator held_back_;  // gradients summed under no_sync
  std::vector<char> no_sync_;      // per replica: inside a no_sync() scope
  // Per local replica: its gradients of the sharded update in progress, read by every replica
  // between read_in_place's barrier and all_gather_shards' (gradients_in_place).
  std::vector<std::vector<Tensor>> published_grads_;
  std::vector<std::vector<Variable>> published_vars_;  // their variables, alike
  mutable std::mutex partial_mu_;
  // Variables (Variable::identity) whose slots hold only this worker's shards.
  std::unordered_set<const void*> partial_;
};

}  // namespace lockstep::distribute
