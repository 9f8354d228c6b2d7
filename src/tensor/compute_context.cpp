#include "lockstep/tensor/compute_context.hpp"

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep {

std::shared_ptr<ComputeContext> make_compute_context(const Device& device, int threads, std::vector<int> cpus,
                                                     std::uint64_t memory_limit) {
  return backend::make_context(
      device, backend::ContextOptions{.threads = threads, .cpus = std::move(cpus), .memory_limit = memory_limit});
}

ComputeContext& current_compute_context() { return backend::current_context(); }
const Device& context_device(const ComputeContext& ctx) { return ctx.device(); }
int context_threads(const ComputeContext& ctx) { return ctx.threads(); }
std::uint64_t context_peak_bytes(const ComputeContext& ctx) {
  return ctx.allocator().stats().peak_bytes_in_use;
}
std::uint64_t context_bytes_in_use(const ComputeContext& ctx) { return ctx.allocator().stats().bytes_in_use; }
void reset_context_peak_bytes(ComputeContext& ctx) { ctx.allocator().reset_peak(); }
std::optional<double> context_utilization_percent(const ComputeContext& ctx) {
  return backend::device_kind(ctx.device().kind).utilization_percent(ctx.device().index);
}
const std::vector<int>& context_cpus(const ComputeContext& ctx) { return ctx.cpus(); }

ComputeScope::ComputeScope(ComputeContext& ctx) : previous_(backend::set_current_context(&ctx)) {}
ComputeScope::~ComputeScope() { backend::set_current_context(previous_); }

struct IdleWork::Impl {
  ComputeContext* ctx;
  backend::ThreadPool::IdleWork work;
  bool offered = false, finished = false;
  Impl(ComputeContext& c, std::int64_t chunks, std::function<void(std::int64_t)> fn)
      : ctx(&c), work(chunks, [ctx = &c, fn = std::move(fn)](std::int64_t i) {
          // On a pool thread, or on the caller in finish(): either way on ctx.
          const ComputeScope scope(*ctx);
          fn(i);
        }) {}
};

IdleWork::IdleWork(ComputeContext& ctx, std::int64_t chunks, std::function<void(std::int64_t)> fn)
    : impl_(std::make_unique<Impl>(ctx, chunks, std::move(fn))) {
  impl_->offered = ctx.device().kind == DeviceKind::kCpu && ctx.pool().offer(impl_->work);
}

IdleWork::~IdleWork() {
  if (impl_->offered && !impl_->finished) impl_->ctx->pool().withdraw(impl_->work);
}

bool IdleWork::offered() const { return impl_->offered; }

void IdleWork::finish() {
  LOCKSTEP_CHECK(!impl_->finished, "IdleWork::finish: already finished");
  impl_->finished = true;
  // Not offered: nothing else can take a chunk, and finish() runs them all.
  impl_->ctx->pool().finish(impl_->work);
}

std::vector<LocalDevice> list_local_devices() {
  std::vector<LocalDevice> out;
  for (const auto& d : backend::list_local_devices()) out.push_back({d.device, d.description});
  return out;
}

std::string gpu_runtime_summary() { return backend::device_kind(DeviceKind::kCuda).runtime_summary(); }

int available_cpu_cores() { return backend::available_cores(); }

}  // namespace lockstep
