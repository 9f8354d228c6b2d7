#pragma once
// What a layer may ask of the replica it runs in, without depending on the distribute layer
// above it: distribute::ReplicaContext implements this, and layers::CallContext carries a
// pointer to it (null when no strategy runs the call). SyncBatchNormalization-style layers
// all-reduce their batch statistics through it.
#include "lockstep/core/reduce_op.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

class ReplicaInterface {
 public:
  virtual ~ReplicaInterface() = default;
  virtual int replica_id_in_sync_group() const = 0;
  virtual int num_replicas_in_sync() const = 0;
  /// All-reduce across the replicas; every replica must call it in the same order with the same
  /// shape. Returns a new tensor on this replica's device.
  virtual Tensor all_reduce(ReduceOp op, const Tensor& value) = 0;
};

}  // namespace lockstep
