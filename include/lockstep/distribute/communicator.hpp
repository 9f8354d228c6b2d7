#pragma once
// Communicator: one member's view of a collective group (c10d's ProcessGroup, seen from one
// rank). A group of N members has N communicators; in a strategy, member r is replica r.
//
// Every member must start the same collectives, in the same order, with the same element
// count, dtype and reduce op (and root): the members' arguments are compared before any data
// moves, and a mismatch fails that collective on every member with a DistributedError naming
// two members' arguments (the group stays usable). Results are bit-identical on every member
// and run to run: each element is combined in member order 0..N-1, whatever the implementation.
// Tensors may have any dtype that reduce_across supports (float32, float16, bfloat16, int32,
// int64, uint8) and any shape; collectives see them as flat arrays of numel() elements.
// Arguments that are wrong on this member alone (an undefined tensor, sizes that do not fit
// the group) throw ValueError at once and start nothing. A collective runs in the compute
// context current on the thread that started it (tensors it makes come from there), which
// must outlive it.
#include <string>

#include "lockstep/distribute/reduce_op.hpp"
#include "lockstep/distribute/work.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::distribute {

class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This member's index in the group, in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// In place: t becomes op over every member's t (kMean: the sum divided by size(), in t's
  /// dtype; integer means truncate).
  virtual WorkPtr all_reduce(Tensor& t, ReduceOp op) = 0;
  /// in: size() * k elements; out: k elements. Member r's out becomes op over every member's
  /// elements [r*k, (r+1)*k) of in (NCCL's chunking). in and out must not overlap.
  virtual WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  /// in: k elements; out: size() * k. Elements [j*k, (j+1)*k) of every member's out become
  /// member j's in. in and out must not overlap.
  virtual WorkPtr all_gather(const Tensor& in, Tensor& out) = 0;
  /// Every member's t becomes member root's t.
  virtual WorkPtr broadcast(Tensor& t, int root) = 0;
  /// Completes once every member started it.
  virtual WorkPtr barrier() = 0;

  /// Marks the group failed: every member's pending and later collectives fail with a
  /// DistributedError naming this member and `reason`, and no member stays blocked, until
  /// CollectiveGroup::reset(). What a member that cannot go on (its step threw) must do.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace lockstep::distribute
