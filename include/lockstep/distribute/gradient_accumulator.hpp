#pragma once
// Gradient accumulation: the gradients of several micro-batches summed locally, without any
// collective, and all-reduced once for the group (PyTorch DDP's no_sync). What fit does for
// FitOptions::gradient_accumulation_steps, and what ReplicaContext::no_sync() gives a custom loop.
//
// The sums live in memory of their own, one tensor per variable copy, made by the first batch
// held for it and kept: a group's first batch copies its gradients there, each later one adds
// into it in place, and the applying one reads it. A captured step (jit_compile) then writes and
// reads the sums where every replay finds them, whichever group it runs in.
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lockstep/autograd/variable.hpp"

namespace lockstep::distribute {

/// Sums are kept per variable copy: each thread adds into the copies current on it (a
/// replica's own), so one accumulator serves every replica of a strategy. Thread-safe.
class GradientAccumulator {
 public:
  /// Adds grads[i] into vars[i]'s sum (an undefined gradient adds nothing): the group's first
  /// gradient is copied into the sum's memory (made here on first use, never inside a capture),
  /// a later one added in place, ((g0 + g1) + g2) as add() sums. No collective.
  void add(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  /// The sums so far plus `grads` (one per variable), new tensors, emptying this thread's sums
  /// for the next group (their memory is kept). A variable that got no gradient yields an
  /// undefined tensor.
  std::vector<Tensor> take(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  /// Drops every sum (a group that will not be applied, e.g. training stopped within it).
  void clear();
  /// Whether nothing is held (a walk over the entries: none where nothing was ever held back).
  bool empty() const;

  /// Whether every copy of every variable of `vars` was held here before, so that its sum has
  /// memory: a batch held back can then be captured (a capture makes no memory that outlives it).
  bool has_memory_for(const std::vector<Variable>& vars) const;
  /// After a step that held back or applied `vars`' gradients, which a replay may have run (its
  /// kernels wrote the sums, this host code never ran): what the step left, as its kind says.
  /// `held`: a batch held back, after which every copy that held a sum after the last add() on
  /// the host holds one (a step's gradients reach the same variables every time); else an
  /// applied batch, after which nothing of `vars` is held.
  void note_step(const std::vector<Variable>& vars, bool held);

 private:
  // What is held is these flags alone (empty() walks them: no count to keep beside them), each
  // written under mu_.
  struct Sum {
    std::weak_ptr<void> copy;  // the variable copy's storage owner: the entry dies with it
    Tensor memory;             // the sum, where the copy got a gradient
    bool held = false;         // memory holds this group's sum so far
    // `held` as the last add() on the host left it: what a replay of a batch held back leaves it
    // at (note_step), whichever group the replay runs in (a step's gradients reach the same
    // variables every time). take(), clear() and an applied batch reset `held`, not this.
    bool held_after_add = false;
  };
  /// The entry of the copy current on this thread (made where there is none). Under mu_.
  Sum& entry_locked(const Tensor& copy);

  mutable std::mutex mu_;
  // Keyed by the variable copy's TensorImpl. Entries are never moved (node-based map), so a
  // thread reads its own, and writes its memory, outside the lock.
  std::unordered_map<const void*, Sum> sums_;
};

}  // namespace lockstep::distribute
