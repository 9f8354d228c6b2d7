#include "lockstep/distribute/gradient_accumulator.hpp"

#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

namespace {
void check_sizes(const std::vector<Tensor>& grads, const std::vector<Variable>& vars, const char* what) {
  LOCKSTEP_CHECK(grads.size() == vars.size(), "GradientAccumulator::", what, ": ", grads.size(),
                 " gradients for ", vars.size(), " variables");
}
}  // namespace

void GradientAccumulator::add(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  check_sizes(grads, vars, "add");
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    LOCKSTEP_CHECK(grads[i].shape() == vars[i].shape(), "GradientAccumulator::add: gradient ", grads[i].shape().str(),
                   " does not match variable '", vars[i].name(), "' ", vars[i].shape().str());
    const void* key = vars[i].value().impl().get();
    Tensor held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sums_.find(key);
      if (it != sums_.end()) held = it->second;
    }
    // Summed outside the lock: other replicas add into their own copies meanwhile. The first
    // gradient is kept as it is (the tape made it, nobody else writes it).
    Tensor sum = held.defined() ? lockstep::add(held, grads[i]) : grads[i];
    std::lock_guard<std::mutex> lock(mu_);
    sums_[key] = std::move(sum);
  }
}

std::vector<Tensor> GradientAccumulator::take(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  if (!grads.empty()) {
    check_sizes(grads, vars, "take");
    add(grads, vars);
  }
  std::vector<Tensor> out(vars.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (std::size_t i = 0; i < vars.size(); ++i) {
    auto it = sums_.find(vars[i].value().impl().get());
    if (it == sums_.end()) continue;
    out[i] = std::move(it->second);
    sums_.erase(it);
  }
  return out;
}

void GradientAccumulator::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  sums_.clear();
}

bool GradientAccumulator::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sums_.empty();
}

}  // namespace lockstep::distribute
