#include "lockstep/autograd/replica_interface.hpp"

namespace lockstep {

namespace {
thread_local ReplicaInterface* t_current_replica = nullptr;
}

ReplicaInterface* current_replica() { return t_current_replica; }

CurrentReplicaScope::CurrentReplicaScope(ReplicaInterface* replica) : previous_(t_current_replica) {
  t_current_replica = replica;
}
CurrentReplicaScope::~CurrentReplicaScope() { t_current_replica = previous_; }

}  // namespace lockstep
