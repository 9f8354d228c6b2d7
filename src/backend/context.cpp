#include "backend/context.hpp"

#include <sched.h>

#include <cstdlib>
#include <thread>

#include "backend/error_marks.hpp"
#include "core/env.hpp"

namespace lockstep::backend {

namespace {
thread_local ComputeContext* t_current = nullptr;
}

ComputeContext::ComputeContext(Device device, int threads, std::vector<int> cpus)
    : device_(device),
      cpus_(cpus),
      allocator_(std::make_shared<CachingHostAllocator>()),
      pool_(std::make_unique<ThreadPool>(threads, std::move(cpus))) {}

ComputeContext::ComputeContext(Device device, std::shared_ptr<Allocator> allocator, void* native)
    : device_(device), allocator_(std::move(allocator)), pool_(std::make_unique<ThreadPool>(1)), native_(native) {}

std::vector<int> available_cpu_ids() {
  std::vector<int> ids;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) ids.push_back(c);
  }
  if (ids.empty())
    for (int c = 0; c < available_cores(); ++c) ids.push_back(c);
  return ids;
}

ComputeContext::~ComputeContext() { release_error_mark(*this); }

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

int default_cpu_threads() {
  // LOCKSTEP_CPU_THREADS caps the default context's pool (benchmarks compare at equal threads).
  const int cores = available_cores();
  if (const auto n = env::integer("LOCKSTEP_CPU_THREADS")) return static_cast<int>(*n);
  return cores;
}

ComputeContext& default_cpu_context() {
  // Leaked on purpose: tensors held in static objects may outlive any destruction order.
  static ComputeContext* ctx = new ComputeContext(Device{DeviceKind::kCpu, 0}, default_cpu_threads());
  return *ctx;
}

ComputeContext& current_context() { return t_current ? *t_current : default_cpu_context(); }

ComputeContext* set_current_context(ComputeContext* ctx) {
  ComputeContext* prev = t_current;
  t_current = ctx;
  return prev;
}

ContextGuard::ContextGuard(ComputeContext& ctx) : previous_(t_current) { t_current = &ctx; }
ContextGuard::~ContextGuard() { t_current = previous_; }

}  // namespace lockstep::backend
