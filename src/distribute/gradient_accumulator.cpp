#include "lockstep/distribute/gradient_accumulator.hpp"

#include <algorithm>

#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/step_capture.hpp"

namespace lockstep::distribute {

namespace {
void check_sizes(const std::vector<Tensor>& grads, const std::vector<Variable>& vars, const char* what) {
  LOCKSTEP_CHECK(grads.size() == vars.size(), "GradientAccumulator::", what, ": ", grads.size(),
                 " gradients for ", vars.size(), " variables");
}

void check_shape(const Tensor& grad, const Variable& var, const char* what) {
  LOCKSTEP_CHECK(grad.shape() == var.shape(), "GradientAccumulator::", what, ": gradient ", grad.shape().str(),
                 " does not match variable '", var.name(), "' ", var.shape().str());
}
}  // namespace

GradientAccumulator::Sum& GradientAccumulator::entry_locked(const Tensor& copy) {
  const auto [it, made] = sums_.try_emplace(copy.impl().get());
  if (!made && !it->second.copy.expired()) return it->second;
  if (!made) it->second = Sum{};  // a dead copy's entry, whose address a new copy took
  it->second.copy = copy.impl();
  // The entries of copies that died since (a model's variables made again) go with their memory.
  std::erase_if(sums_, [](const auto& e) { return e.second.copy.expired(); });
  return it->second;
}

void GradientAccumulator::add(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  check_sizes(grads, vars, "add");
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const Tensor& g = grads[i];
    Sum* s = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s = &entry_locked(vars[i].value());
      s->held_after_add = s->held || g.defined();
    }
    if (!g.defined()) continue;
    check_shape(g, vars[i], "add");
    // Only this thread touches its copy's entry until the next host call between steps, and a
    // replica's kernels run outside the lock: the others add into their own copies meanwhile.
    if (s->held) {
      LOCKSTEP_CHECK(g.dtype() == s->memory.dtype(), "GradientAccumulator::add: a ", dtype_name(g.dtype()),
                     " gradient of variable '", vars[i].name(), "' after ", dtype_name(s->memory.dtype()), " ones");
      // In place: the bits of add(sum, g), which summed them before.
      reduce_across(ReduceOp::kSum, {s->memory, g}, {s->memory}, 0, g.numel());
    } else {
      if (!s->memory.defined() || s->memory.shape() != g.shape() || s->memory.dtype() != g.dtype()) {
        // Made where nothing is captured: a graph's memory would belong to its pool.
        LOCKSTEP_CHECK(!StepGraph::capturing_here(), "GradientAccumulator::add: the sum of variable '",
                       vars[i].name(), "' is first held inside a captured step, which cannot make its memory; "
                       "an eager step holding it back makes it");
        s->memory = Tensor::empty(g.shape(), g.dtype());
      }
      s->memory.copy_from(g);
    }
    std::lock_guard<std::mutex> lock(mu_);
    s->held = true;
  }
}

std::vector<Tensor> GradientAccumulator::take(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  check_sizes(grads, vars, "take");
  std::vector<Tensor> out(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const Tensor& g = grads[i];
    if (g.defined()) check_shape(g, vars[i], "take");
    Sum* s = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = sums_.find(vars[i].value().impl().get());
      if (it == sums_.end() || !it->second.held) {
        out[i] = g;
        continue;
      }
      s = &it->second;
      s->held = false;
    }
    // A new tensor: the sum's memory takes the next group's first gradient.
    out[i] = g.defined() ? lockstep::add(s->memory, g) : s->memory.clone();
  }
  return out;
}

void GradientAccumulator::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, s] : sums_) s.held = false;
}

bool GradientAccumulator::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::none_of(sums_.begin(), sums_.end(), [](const auto& e) { return e.second.held; });
}

bool GradientAccumulator::has_memory_for(const std::vector<Variable>& vars) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Variable& v : vars) {
    for (int q = 0; q < v.num_copies(); ++q) {
      const auto it = sums_.find(v.copy(q).impl().get());
      if (it == sums_.end() || it->second.copy.expired()) return false;
    }
  }
  return true;
}

void GradientAccumulator::note_step(const std::vector<Variable>& vars, bool held) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Variable& v : vars) {
    for (int q = 0; q < v.num_copies(); ++q) {
      const auto it = sums_.find(v.copy(q).impl().get());
      if (it != sums_.end()) it->second.held = held && it->second.held_after_add;
    }
  }
}

}  // namespace lockstep::distribute
