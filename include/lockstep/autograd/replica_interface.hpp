#pragma once
// What the layers below the distribute layer may ask of the replica they run in:
// distribute::ReplicaContext implements this. A layer reaches it through
// layers::CallContext::replica (null when no strategy runs the call); an optimizer or a metric
// through current_replica(), the replica whose function runs on this thread, which is how
// `optimizer.apply_gradients` inside `strategy.run` knows to all-reduce (TF's merge_call).
#include <cstdint>
#include <functional>
#include <vector>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/core/reduce_op.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// One replica's part of a sharded optimizer update (ZeRO stage 1): elements [begin, end) of
/// variable `variable` (an index into the list handed over, flattened), and their gradient
/// summed over every replica (`grad`: end - begin elements, flat).
///
/// Replicas that share memory exchange nothing: `grad` is then undefined and `parts` holds every
/// replica's own gradient of these elements, in member order, where its backward pass left them,
/// to be summed in that order (((parts[0] + parts[1]) + ...), the bits of the collectives' sum) by
/// the update itself; `copies` holds the other replicas' copies of these elements, which the
/// update writes its new values into as well (all_gather_shards then moves nothing). Both are
/// flat views, valid until all_gather_shards returns.
struct GradientShard {
  std::size_t variable = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  Tensor grad;
  std::vector<Tensor> parts;
  std::vector<Tensor> copies;
};

/// How a replica's gradients are summed across the replicas: every replica receives every sum
/// (all_reduce_gradients), or only the sums of the elements it updates (reduce_scatter_gradients).
enum class GradientExchange { kAllReduce, kReduceScatter };

/// Called with a variable's index and its final gradient during the backward pass.
using GradientReadyFn = GradientTape::GradientReady;

class ReplicaInterface {
 public:
  virtual ~ReplicaInterface() = default;
  virtual int replica_id_in_sync_group() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  /// The replicas of this process (worker), which hold the copies of a mirrored variable.
  virtual int num_local_replicas() const = 0;
  /// All-reduce across the replicas; every replica must call it in the same order with the same
  /// shape. Returns a new tensor on this replica's device.
  virtual Tensor all_reduce(ReduceOp op, const Tensor& value) = 0;
  /// Sums the gradients of `vars` across the replicas in place (bucketed; an undefined gradient
  /// counts as zeros). Every replica must call it with the same variables. False when the
  /// gradients were only held back (gradient accumulation's no_sync): nothing to apply yet.
  virtual bool all_reduce_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars) = 0;
  /// ZeRO stage 1: whether the replicas share the update of `vars` (each updates its shard of
  /// every variable, the copies then exchange the shards) rather than each updating all of its
  /// copies. What the strategy allows (more than one replica, CPU devices, float32 variables,
  /// not turned off); the optimizer adds its own conditions.
  virtual bool shards_update(const std::vector<Variable>& vars) const = 0;
  /// As all_reduce_gradients, but the sums are reduce-scattered: `shards` receives only the
  /// elements this replica updates, with their summed gradients, or the replicas' gradients to
  /// sum and the copies to write (GradientShard; `grads` is left as it is, and must stay so until
  /// all_gather_shards). False (and no shards) when the gradients were held back by no_sync.
  virtual bool reduce_scatter_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                        std::vector<GradientShard>& shards) = 0;
  /// Overlaps the exchange with the backward pass (PyTorch DDP's Reducer hooks): returns what
  /// the tape should call with each of `vars`' gradients as soon as it is final. Each bucket's
  /// collective starts once its gradients are all in, while the backward pass goes on; the next
  /// all_reduce_gradients (kAllReduce) or reduce_scatter_gradients (kReduceScatter) of the same
  /// `vars`, with the gradients the tape returned, finishes it, within the same strategy.run
  /// (one left unfinished when the function returns or throws is dropped). An empty function where nothing
  /// can start early (under no_sync, or with gradients held back by it); those calls then do
  /// the whole exchange, as without this.
  virtual GradientReadyFn begin_gradient_exchange(const std::vector<Variable>& vars, GradientExchange kind) = 0;
  /// After this replica updated `shards` of its own copies (and wrote any GradientShard::copies):
  /// writes them into every other replica's copies and returns once every replica's shards are
  /// in every copy (the all-gather of the updated weights).
  virtual void all_gather_shards(const std::vector<Variable>& vars, const std::vector<GradientShard>& shards) = 0;
  /// The variables of this replica's last reduce_scatter_gradients, in its order.
  virtual std::vector<Variable> sharded_variables() const = 0;
  /// For state kept beside the variables and updated by shards (an optimizer's slots) when the
  /// replicas span several workers: `state` holds one tensor per sharded_variables(), shared by
  /// this worker's replicas and up to date in their shards only. Every replica calls it with the
  /// same tensors; when it returns they hold every worker's shards.
  virtual void all_gather_shared_state(std::vector<Tensor>& state) = 0;
  /// When the strategy ran this function on a distributed batch (strategy.run(fn, batch)): the
  /// global row index of this replica's first row, and the global batch's size; else 0 and 0.
  virtual std::int64_t first_example() const = 0;
  virtual std::int64_t global_batch_size() const = 0;
  /// How many steps (strategy.run calls) the strategy ran before this one: the same on every
  /// replica, so it keys per-step randomness (dropout) identically whatever the replica count.
  virtual std::uint64_t step_index() const = 0;
};

/// The replica whose function runs on this thread, or null outside strategy.run.
ReplicaInterface* current_replica();

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
