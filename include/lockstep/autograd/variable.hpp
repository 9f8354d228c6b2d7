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
  /// Keras 3's variable.trainable = value (what a layer's freezing sets): from now on the tape
  /// watches the variable (every copy) or not. A kOnRead variable stays non-trainable (TF's rule).
  void set_trainable(bool trainable) const;
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
  /// What is_same compares: one value for every handle on this variable (a map key).
  const void* identity() const { return impl_.get(); }

  /// A new non-trainable variable of float32 zeros shaped like `like`, placed like it: one copy
  /// per replica device it is mirrored over, each allocated there (Keras'
  /// add_variable_from_reference: how an optimizer makes its slots).
  static Variable zeros_like(const Variable& like, std::string name);
  /// The same, shaped `shape` (an optimizer's step block: lockstep/core/step_state.hpp).
  static Variable zeros_like(const Variable& like, std::string name, const Shape& shape);
  /// Mirrors this variable over the devices `like` is mirrored over (mirror's rules).
  void mirror_like(const Variable& like) { mirror(like.impl_->contexts); }
  /// Every copy becomes the primary copy itself: one tensor that every replica reads and
  /// writes (a sharded update keeps an optimizer slot so: each replica updates its ranges of
  /// copy 0). broadcast_primary() gives each copy its own memory again.
  void share_primary() const;
  /// Whether the copies are the primary itself (share_primary) rather than each its own.
  bool shares_primary() const { return impl_ && impl_->copies.size() > 1 && impl_->copies[1].impl() == impl_->copies[0].impl(); }
  /// Copies the primary into every other copy, each on its own device (allocated again where
  /// it shared the primary's memory). Outside the replicas.
  void broadcast_primary() const;

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
