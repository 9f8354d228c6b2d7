#include "lockstep/autograd/replica_interface.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "lockstep/tensor/compute_context.hpp"

namespace lockstep {

namespace {
thread_local ReplicaInterface* t_current_replica = nullptr;
}

ReplicaInterface* current_replica() { return t_current_replica; }

namespace {
std::mutex& sharded_slots_mutex() {
  static std::mutex m;
  return m;
}
std::vector<const ShardedSlots*>& live_sharded_slots() {
  static std::vector<const ShardedSlots*> records;
  return records;
}
}  // namespace

void register_sharded_slots(const ShardedSlots* record) {
  std::lock_guard<std::mutex> lock(sharded_slots_mutex());
  live_sharded_slots().push_back(record);
}

void unregister_sharded_slots(const ShardedSlots* record) {
  std::lock_guard<std::mutex> lock(sharded_slots_mutex());
  auto& records = live_sharded_slots();
  records.erase(std::remove(records.begin(), records.end(), record), records.end());
}

bool slots_held_in_shards(const Variable& var) {
  std::lock_guard<std::mutex> lock(sharded_slots_mutex());
  for (const ShardedSlots* record : live_sharded_slots())
    if (record->only_shards_here(var)) return true;
  return false;
}

void check_made_in_scope(const Variable& v, const std::string& who, bool for_update) {
  const ReplicaInterface* replica = current_replica();
  if (!replica) return;
  const int n = replica->num_local_replicas();
  const Device& here = context_device(current_compute_context());
  const Device& at = v.value().device();
  const bool copies_ok = !for_update || v.num_copies() == n || n == 1;
  if (copies_ok && at.kind == here.kind) return;
  throw ValueError(who + ": variable '" + v.name() + "' has " + std::to_string(v.num_copies()) +
                   (v.num_copies() == 1 ? " copy" : " copies") + " (on " + at.str() + ") but " + std::to_string(n) +
                   (n == 1 ? " replica runs" : " replicas run") + " in this process (this one on " + here.str() +
                   "): it was not created in the distribution strategy's scope. It is most likely because some "
                   "layers, model, or optimizer was being created outside the distribution strategy scope. Create "
                   "the model inside `auto scope = strategy.scope();`, or call model.distribute(strategy) before "
                   "training");
}

CurrentReplicaScope::CurrentReplicaScope(ReplicaInterface* replica) : previous_(t_current_replica) {
  t_current_replica = replica;
}
CurrentReplicaScope::~CurrentReplicaScope() { t_current_replica = previous_; }

}  // namespace lockstep
