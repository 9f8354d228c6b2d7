#include "lockstep/data/thread_budget.hpp"

#include <algorithm>
#include <utility>

#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::data {

ThreadBudget::ThreadBudget(int cores) : cores_(cores) {
  LOCKSTEP_CHECK(cores >= 1, "ThreadBudget: cores must be >= 1, got ", cores);
}

ThreadBudget& ThreadBudget::process() {
  // Leaked on purpose, like the default compute context: pipelines in static objects may
  // release leases during static destruction.
  static ThreadBudget* budget = new ThreadBudget(available_cpu_cores());
  return *budget;
}

ThreadBudget::Lease ThreadBudget::reserve_compute(int cores) {
  LOCKSTEP_CHECK(cores >= 0, "ThreadBudget::reserve_compute: cores must be >= 0, got ", cores);
  std::lock_guard<std::mutex> lock(mu_);
  compute_ += cores;
  return Lease(this, Lease::Kind::kCompute, cores);
}

ThreadBudget::Lease ThreadBudget::acquire_input(int wanted) {
  LOCKSTEP_CHECK(wanted >= 1, "ThreadBudget::acquire_input: wanted must be >= 1, got ", wanted);
  std::lock_guard<std::mutex> lock(mu_);
  const int room = std::max(0, std::max(1, cores_ - compute_) - input_);
  const int granted = std::max(1, std::min(wanted, room));
  input_ += granted;
  return Lease(this, Lease::Kind::kInput, granted);
}

int ThreadBudget::compute_reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compute_;
}
int ThreadBudget::input_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return input_;
}
int ThreadBudget::input_capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(1, cores_ - compute_);
}
std::size_t ThreadBudget::buffer_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffer_bytes_;
}
void ThreadBudget::set_buffer_bytes(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  buffer_bytes_ = bytes;
}

ThreadBudget::Lease::~Lease() { release(); }

ThreadBudget::Lease::Lease(Lease&& o) noexcept
    : budget_(std::exchange(o.budget_, nullptr)), kind_(o.kind_), count_(std::exchange(o.count_, 0)) {}

ThreadBudget::Lease& ThreadBudget::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::exchange(o.budget_, nullptr);
    kind_ = o.kind_;
    count_ = std::exchange(o.count_, 0);
  }
  return *this;
}

void ThreadBudget::Lease::release() {
  if (!budget_ || count_ == 0) return;
  std::lock_guard<std::mutex> lock(budget_->mu_);
  (kind_ == Kind::kCompute ? budget_->compute_ : budget_->input_) -= count_;
  count_ = 0;
}

bool ThreadBudget::Lease::try_grow() {
  if (!budget_ || kind_ != Kind::kInput) return false;
  std::lock_guard<std::mutex> lock(budget_->mu_);
  if (budget_->input_ >= std::max(1, budget_->cores_ - budget_->compute_)) return false;
  ++budget_->input_;
  ++count_;
  return true;
}

void ThreadBudget::Lease::shrink() {
  if (!budget_ || count_ == 0) return;
  std::lock_guard<std::mutex> lock(budget_->mu_);
  (kind_ == Kind::kCompute ? budget_->compute_ : budget_->input_) -= 1;
  --count_;
}

bool ThreadBudget::Lease::should_shrink() const {
  if (!budget_ || kind_ != Kind::kInput || count_ <= 1) return false;
  std::lock_guard<std::mutex> lock(budget_->mu_);
  return budget_->input_ > std::max(1, budget_->cores_ - budget_->compute_);
}

}  // namespace lockstep::data
