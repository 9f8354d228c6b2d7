#pragma once
// Gradient accumulation: the gradients of several micro-batches summed locally, without any
// collective, and all-reduced once for the group (PyTorch DDP's no_sync). What fit does for
// FitOptions::gradient_accumulation_steps, and what ReplicaContext::no_sync() gives a custom loop.
#include <mutex>
#include <unordered_map>
#include <vector>

#include "lockstep/autograd/variable.hpp"

namespace lockstep::distribute {

/// Sums are kept per variable copy: each thread adds into the copies current on it (a
/// replica's own), so one accumulator serves every replica of a strategy. Thread-safe.
class GradientAccumulator {
 public:
  /// Adds grads[i] into vars[i]'s sum (an undefined gradient adds nothing). No collective.
  void add(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  /// The sums so far plus `grads` (one per variable, or empty), emptying this thread's sums
  /// for the next group. A variable that got no gradient yields an undefined tensor.
  std::vector<Tensor> take(const std::vector<Tensor>& grads, const std::vector<Variable>& vars);
  /// Drops every sum (a group that will not be applied, e.g. training stopped within it).
  void clear();
  /// Whether nothing is held.
  bool empty() const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<const void*, Tensor> sums_;  // keyed by the variable copy's TensorImpl
};

}  // namespace lockstep::distribute
