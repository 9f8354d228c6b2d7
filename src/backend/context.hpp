#pragma once
// A compute context: a device with its own allocator and compute pool. Each replica thread
// makes its context current with ContextGuard; every op on that thread allocates from and
// computes on it. A thread with no context uses the process's default CPU context (every
// core), which is what "no strategy" means.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/allocator.hpp"
#include "backend/thread_pool.hpp"
#include "lockstep/core/device.hpp"

namespace lockstep::backend {

struct ErrorMark;

class ComputeContext {
 public:
  /// A CPU context computing on `threads` threads (pinned to `cpus` when given).
  ComputeContext(Device device, int threads, std::vector<int> cpus = {});
  /// A device context of another backend: its allocator and the backend's own state for the
  /// device (`native`, e.g. the CUDA stream and library handles; not owned). Its pool has one
  /// thread (the caller): the device computes, not the pool.
  ComputeContext(Device device, std::shared_ptr<Allocator> allocator, void* native);
  ~ComputeContext();

  const Device& device() const { return device_; }
  Allocator& allocator() { return *allocator_; }
  const Allocator& allocator() const { return *allocator_; }
  const std::shared_ptr<Allocator>& allocator_ptr() const { return allocator_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }
  const std::vector<int>& cpus() const { return cpus_; }
  /// The backend's state for this device (null for the CPU).
  void* native() const { return native_.load(std::memory_order_relaxed); }
  /// Replaces it (DeviceOps::use_stream: the GPU queue this context computes on). The caller
  /// orders the change with the threads that compute on the context (a strategy does it between
  /// steps, before it hands the replicas their work).
  void set_native(void* native) { native_.store(native, std::memory_order_relaxed); }

  /// Its device-side error mark once made (error_marks.hpp: error_mark makes it), else null.
  ErrorMark* error_mark() const { return error_mark_.load(std::memory_order_acquire); }
  void set_error_mark(ErrorMark* mark) { error_mark_.store(mark, std::memory_order_release); }
  /// Whether its mark is its own (error_marks.hpp: a replica's context while a step runs): raised
  /// only by a read on this context, which raises no other context's.
  bool own_marks() const { return own_marks_.load(std::memory_order_acquire); }
  void set_own_marks(bool own) { own_marks_.store(own, std::memory_order_release); }

 private:
  Device device_;
  std::vector<int> cpus_;
  std::shared_ptr<Allocator> allocator_;
  std::unique_ptr<ThreadPool> pool_;
  std::atomic<void*> native_{nullptr};
  std::atomic<ErrorMark*> error_mark_{nullptr};
  std::atomic<bool> own_marks_{false};
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
  /// GPU devices: the most bytes of tensor memory this context may hold (a logical device's
  /// share of the GPU, TF's memory_limit); 0: no limit but the device's memory.
  std::uint64_t memory_limit = 0;
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
