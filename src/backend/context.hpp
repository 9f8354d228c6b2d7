#pragma once
// A compute context: a device with its own allocator and compute pool. Each replica thread
// makes its context current with ContextGuard; every op on that thread allocates from and
// computes on it. A thread with no context uses the process's default CPU context (every
// core), which is what "no strategy" means.
#include <memory>
#include <vector>

#include "backend/allocator.hpp"
#include "backend/thread_pool.hpp"
#include "lockstep/core/device.hpp"

namespace lockstep::backend {

class ComputeContext {
 public:
  /// A CPU context computing on `threads` threads (pinned to `cpus` when given).
  ComputeContext(Device device, int threads, std::vector<int> cpus = {});
  ~ComputeContext();

  const Device& device() const { return device_; }
  Allocator& allocator() { return *allocator_; }
  const Allocator& allocator() const { return *allocator_; }
  const std::shared_ptr<Allocator>& allocator_ptr() const { return allocator_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }
  const std::vector<int>& cpus() const { return cpus_; }

 private:
  Device device_;
  std::vector<int> cpus_;
  std::shared_ptr<Allocator> allocator_;
  std::unique_ptr<ThreadPool> pool_;
};

/// The context current on this thread (the default CPU context when none was set).
ComputeContext& current_context();
/// The default CPU context: one per process, every usable core.
ComputeContext& default_cpu_context();
/// Number of cores this process may use (sched affinity).
int available_cores();
/// Their ids.
std::vector<int> available_cpu_ids();
/// Threads of the default CPU context: LOCKSTEP_CPU_THREADS when set (> 0), else available_cores().
int default_cpu_threads();

/// Installs `ctx` (null: none) as this thread's context; returns the previous one (or null).
ComputeContext* set_current_context(ComputeContext* ctx);

/// What a context is built with (threads and pinning apply to CPU devices).
struct ContextOptions {
  int threads = 1;
  std::vector<int> cpus;
};
/// Builds the context of `device` for its kind (registry.cpp): allocator, pool or stream.
/// Throws ValueError when that kind's backend is not built.
std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options);

/// Makes `ctx` current on this thread for the guard's lifetime.
class ContextGuard {
 public:
  explicit ContextGuard(ComputeContext& ctx);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  ComputeContext* previous_;
};

}  // namespace lockstep::backend
