#pragma once
// What the layers below the distribute layer may ask of the replica they run in:
// distribute::ReplicaContext implements this. A layer reaches it through
// layers::CallContext::replica (null when no strategy runs the call); an optimizer or a metric
// through current_replica(), the replica whose function runs on this thread, which is how
// `optimizer.apply_gradients` inside `strategy.run` knows to exchange the gradients (TF's
// merge_call). The exchange and the sharded update (distribute::ShardedUpdate) are the
// distribute layer's; an optimizer hands it only its elementwise rule (ElementwiseRule).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/core/reduce_op.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// One range of a sharded update (ZeRO stage 1): elements [begin, end) of variable `variable`
/// (an index into the list handed over, flattened). `grads` are flat views whose sum, taken in
/// their order (((grads[0] + grads[1]) + ...), the bits of the collectives' sum), is the range's
/// gradient summed over every replica: one tensor when the collective summed it already, every
/// replica's own gradient where replicas share memory and the update reads them in place.
/// `copies` are the other replicas' copies of the range (flat views), which the update writes
/// its new values into as well; empty when the strategy copies them itself afterwards.
struct GradientShard {
  std::size_t variable = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::vector<Tensor> grads;
  std::vector<Tensor> copies;
};

/// The sharded update's record of slots held in shards across workers (each worker updates,
/// and so holds, only its ranges of them until they are gathered). What saves ask before they
/// write an optimizer's slots (io::slots_to_save): the optimizer does not know.
class ShardedSlots {
 public:
  virtual ~ShardedSlots() = default;
  /// Whether this worker holds only its shards of `var`'s slots.
  virtual bool only_shards_here(const Variable& var) const = 0;
};
/// The live records, so that a save not handed one (a custom loop's own io::save_checkpoint)
/// still refuses split slots: a sharded update registers itself for its lifetime.
void register_sharded_slots(const ShardedSlots* record);
void unregister_sharded_slots(const ShardedSlots* record);
/// Whether any live record says this worker holds only its shards of `var`'s slots.
bool slots_held_in_shards(const Variable& var);

/// What a sharded update asks of an optimizer (Optimizer::elementwise_rule): its rule, where
/// the update of one element needs only that element, so that the replicas can share it.
class ElementwiseRule {
 public:
  virtual ~ElementwiseRule() = default;
  /// Applies step `step`'s rule to this replica's copy of each range of `vars` (and its
  /// `copies`), with the slots that every copy shares (shared_slots).
  virtual void apply(const std::vector<Variable>& vars, const std::vector<GradientShard>& ranges, std::int64_t step) = 0;
  /// The slot tensors (whole) of `var` that a sharded update updates: the primary copy of each
  /// slot variable, which every copy shares from then on (Variable::share_primary, until
  /// Optimizer::broadcast_slots gives each its own again).
  virtual std::vector<Tensor> shared_slots(const Variable& var) = 0;
};

/// Called with a variable's index and its final gradient during the backward pass.
using GradientReadyFn = GradientTape::GradientReady;

/// Which replica this is, among how many.
struct ReplicaIds {
  int replica_id_in_sync_group = 0;
  int num_replicas_in_sync = 1;
  /// The replicas of this process (worker), which hold the copies of a mirrored variable.
  int num_local_replicas = 1;
};

/// Where the step in progress is. When the strategy ran this function on a distributed batch
/// (strategy.run(fn, batch)): the global row index of this replica's first row, and the global
/// batch's size; else 0 and 0. step_index: how many steps (strategy.run calls) the strategy ran
/// before this one, the same on every replica, so it keys per-step randomness (dropout)
/// identically whatever the replica count.
struct ReplicaPosition {
  std::int64_t first_example = 0;
  std::int64_t global_batch_size = 0;
  std::uint64_t step_index = 0;
};

/// What exchange_gradients did: held them back (no_sync: nothing to apply yet), summed them in
/// place (every replica then applies the whole update to its own copies), or summed and
/// applied them itself, sharded over the replicas.
enum class GradientsExchanged { kHeldBack, kSummed, kApplied };

class ReplicaInterface {
 public:
  virtual ~ReplicaInterface() = default;
  virtual ReplicaIds ids() const = 0;
  virtual ReplicaPosition position() const = 0;
  /// All-reduce across the replicas; every replica must call it in the same order with the same
  /// shape. Returns a new tensor on this replica's device.
  virtual Tensor all_reduce(ReduceOp op, const Tensor& value) = 0;
  /// Sums the gradients of `vars` across the replicas (an undefined gradient counts as zeros)
  /// and, where `rule` is given and the strategy shards the update, applies step `step` of it
  /// sharded over the replicas (kApplied); otherwise replaces `grads` with the sums (kSummed).
  /// Every replica must call it with the same variables.
  virtual GradientsExchanged exchange_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                                ElementwiseRule* rule, std::int64_t step) = 0;
  /// Overlaps the exchange with the backward pass (PyTorch DDP's Reducer hooks): returns what
  /// the tape should call with each of `vars`' gradients as soon as it is final. Each bucket's
  /// collective starts once its gradients are all in, while the backward pass goes on; the next
  /// exchange_gradients of the same `vars` and rule, with the gradients the tape returned,
  /// finishes it, within the same strategy.run (one left unfinished when the function returns or
  /// throws is dropped). An empty function where nothing can start early (under no_sync, or
  /// with gradients held back by it); exchange_gradients then does the whole exchange.
  virtual GradientReadyFn begin_gradient_exchange(const std::vector<Variable>& vars, ElementwiseRule* rule) = 0;

  int replica_id_in_sync_group() const { return ids().replica_id_in_sync_group; }
  int num_replicas_in_sync() const { return ids().num_replicas_in_sync; }
  int num_local_replicas() const { return ids().num_local_replicas; }
  std::int64_t first_example() const { return position().first_example; }
  std::int64_t global_batch_size() const { return position().global_batch_size; }
  std::uint64_t step_index() const { return position().step_index; }
  /// exchange_gradients without a rule: sums `grads` over the replicas in place (bucketed).
  /// False when the gradients were only held back (gradient accumulation's no_sync).
  bool all_reduce_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
    return exchange_gradients(grads, vars, nullptr, 0) != GradientsExchanged::kHeldBack;
  }
};

/// The replica whose function runs on this thread, or null outside strategy.run.
ReplicaInterface* current_replica();
/// Inside a replica function: ValueError with Keras' message and its fix (model.distribute(strategy))
/// when `v` was not made in the strategy's scope, so that this replica cannot use it: its copy here
/// is on another kind of device (a GPU replica and a variable left on the host), or, `for_update`,
/// it lacks a copy per local replica (reading a host variable from CPU replicas is fine; updating
/// one copy from every replica is not). `who` starts the message. Nothing outside the replicas.
void check_made_in_scope(const Variable& v, const std::string& who, bool for_update);

/// Makes `replica` current on this thread while it lives (the strategy sets it around each
/// replica function; nested scopes restore the previous one).
class CurrentReplicaScope {
 public:
  explicit CurrentReplicaScope(ReplicaInterface* replica);
  ~CurrentReplicaScope();
  CurrentReplicaScope(const CurrentReplicaScope&) = delete;
  CurrentReplicaScope& operator=(const CurrentReplicaScope&) = delete;

 private:
  ReplicaInterface* previous_;
};

}  // namespace lockstep
