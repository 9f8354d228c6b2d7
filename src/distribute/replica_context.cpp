// What a replica function sees: its ids, its collectives, and the gradient exchange, which the
// strategy's ShardedUpdate does for it.
#include "lockstep/distribute/strategy.hpp"

namespace lockstep::distribute {

ReplicaIds ReplicaContext::ids() const {
  const int local = strategy_.num_local_replicas();
  return {.replica_id_in_sync_group = strategy_.worker_index() * local + replica_id_,
          .num_replicas_in_sync = strategy_.num_replicas_in_sync(),
          .num_local_replicas = local};
}

ReplicaPosition ReplicaContext::position() const {
  const DistributedBatch* b = strategy_.batch_in_step_;
  return {.first_example = b ? b->offsets[static_cast<std::size_t>(replica_id_)] : 0,
          .global_batch_size = b ? b->global_size : 0,
          .step_index = strategy_.steps_run_};
}

const Device& ReplicaContext::device() const { return strategy_.devices()[static_cast<std::size_t>(replica_id_)]; }

Communicator& ReplicaContext::communicator() { return strategy_.communicator(replica_id_); }

Tensor ReplicaContext::all_reduce(ReduceOp op, const Tensor& value) {
  LOCKSTEP_CHECK(value.defined(), "ReplicaContext::all_reduce: the value is an undefined tensor");
  Tensor out = value.clone();
  communicator().all_reduce(out, op)->wait();
  return out;
}

GradientsExchanged ReplicaContext::exchange_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                                      ElementwiseRule* rule, std::int64_t step) {
  return strategy_.update_->exchange(replica_id_, grads, vars, rule, step);
}

GradientReadyFn ReplicaContext::begin_gradient_exchange(const std::vector<Variable>& vars, ElementwiseRule* rule) {
  return strategy_.update_->begin(replica_id_, vars, rule);
}

bool ReplicaContext::shards_update(const std::vector<Variable>& vars) const { return strategy_.update_->allows(vars); }

ReplicaContext* get_replica_context() {
  // Only ReplicaContext implements ReplicaInterface in this library; a test double would not be
  // a distribute-layer replica, so this asks rather than assumes.
  return dynamic_cast<ReplicaContext*>(current_replica());
}

NoSyncScope ReplicaContext::no_sync(bool enabled) { return NoSyncScope(strategy_, replica_id_, enabled); }

NoSyncScope::NoSyncScope(Strategy& strategy, int replica_id, bool enabled)
    : strategy_(strategy), replica_id_(replica_id), previous_(strategy.update_->no_sync(replica_id)) {
  if (enabled) strategy_.update_->set_no_sync(replica_id_, true);
}
NoSyncScope::~NoSyncScope() { strategy_.update_->set_no_sync(replica_id_, previous_); }

const GradientReducer& Strategy::gradient_reducer(int replica) const {
  LOCKSTEP_CHECK(replica >= 0 && replica < num_local_replicas(), "replica ", replica, " out of range");
  return update_->reducer(replica);
}

void Strategy::drop_held_back_gradients() { update_->drop_held_back(); }
GradientAccumulator& Strategy::held_back_gradients() { return update_->held_back(); }

void Strategy::gather_sharded_slots(ElementwiseRule* rule) {
  if (!rule || num_workers_ == 1 || !update_->slots_partial()) return;
  run_void([&](ReplicaContext& ctx) { update_->gather_slots(ctx.local_replica_id(), *rule); });
}

}  // namespace lockstep::distribute
