#pragma once
// A Variable: a named, mutable tensor that GradientTape watches automatically when trainable
// (as tf.Variable). Copies share the same variable; assign* update it in place, so tensors
// previously read from it see the new values.
#include <memory>
#include <string>

#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// While alive on a thread, Variables created on it are mirrored over `contexts` (one copy
/// per replica device). MirroredStrategy::scope() installs one.
class MirrorScope {
 public:
  explicit MirrorScope(std::vector<ComputeContext*> contexts);
  ~MirrorScope();
  MirrorScope(const MirrorScope&) = delete;
  MirrorScope& operator=(const MirrorScope&) = delete;
  /// The contexts of the innermost scope on this thread (empty when none).
  static const std::vector<ComputeContext*>* current();

 private:
  std::vector<ComputeContext*> contexts_;
  const std::vector<ComputeContext*>* previous_;
};

/// How the copies of a variable on the replicas relate (tf.VariableSynchronization).
enum class VariableSynchronization {
  kAuto,     // kOnWrite
  kOnWrite,  // mirrored: every update is applied to every copy, so they stay identical
  kOnRead,   // each replica updates its own copy (layer state, metric totals); reading outside
             // the replicas aggregates the copies
};
/// How kOnRead copies combine when read outside the replicas (tf.VariableAggregation).
enum class VariableAggregation { kNone, kSum, kMean, kOnlyFirstReplica };

struct VariableOptions {
  std::string name;
  bool trainable = true;
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
};

class Variable {
 public:
  Variable() = default;
  Variable(Tensor initial_value, std::string name = "", bool trainable = true);
  /// With TF's rules: kOnRead needs trainable = false and an aggregation other than kNone.
  Variable(Tensor initial_value, const VariableOptions& options);

  bool defined() const { return impl_ != nullptr; }
  /// The current value (aliases the variable's storage). For a mirrored variable: the copy of
  /// the replica whose compute context is current on this thread, else the primary copy (0).
  const Tensor& value() const;
  const std::string& name() const;
  bool trainable() const;
  VariableSynchronization synchronization() const;
  VariableAggregation aggregation() const;
  /// The value as TF's read_value(): inside a replica its own copy; outside, a kOnWrite
  /// variable's primary copy and a kOnRead variable's copies aggregated (summed, averaged, or
  /// the first). A new tensor for an aggregate, else the copy itself.
  Tensor read_value() const;
  const Shape& shape() const { return value().shape(); }

  /// Assigns v. On a mirrored variable, inside a replica: that replica's copy; outside: every
  /// copy (a kOnRead kSum variable gets v / copies in each, so that read_value() is v, as TF).
  /// Const because a Variable is a handle on shared state (as a shared_ptr): a layer's const
  /// call() updates its state variables this way.
  void assign(const Tensor& v) const;
  void assign_add(const Tensor& delta) const;
  void assign_sub(const Tensor& delta) const;

  bool is_same(const Variable& o) const { return impl_ == o.impl_; }

  /// Makes this variable mirrored over `contexts`: one copy per context, each allocated there
  /// and equal to the current primary value (a broadcast from replica 0; for kOnRead kSum, copy
  /// 0 keeps the value and the others start at zero, so read_value() is unchanged). Re-mirroring
  /// over the same contexts is a no-op.
  void mirror(const std::vector<ComputeContext*>& contexts);
  bool mirrored() const { return impl_ && impl_->copies.size() > 1; }
  int num_copies() const { return impl_ ? static_cast<int>(impl_->copies.size()) : 0; }
  /// Copy r of a mirrored variable (r = 0 for a plain one).
  const Tensor& copy(int r) const;

 private:
  struct Impl {
    std::vector<Tensor> copies;  // one per replica; copies[0] is the primary
    std::vector<ComputeContext*> contexts;
    std::string name;
    bool trainable = true;
    VariableSynchronization synchronization = VariableSynchronization::kOnWrite;
    VariableAggregation aggregation = VariableAggregation::kNone;
  };
  /// The index of the copy whose context is current on this thread, or -1 outside the replicas.
  int replica_copy() const;
  std::shared_ptr<Impl> impl_;
};

/// True when this tensor is the value of a trainable Variable (the tape watches it by itself).
bool is_trainable_variable_value(const Tensor& t);

}  // namespace lockstep
