// The one place that knows which backends exist: a row per device kind (device_kind). An
// optional backend is a plugin with a loader (cuda_loader.hpp).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "backend/capture.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/devices.hpp"
#include "backend/emulated_gpu.hpp"
#include "backend/emulated_capture.hpp"
#include "backend/staged_copy.hpp"
#include "backend/staging_pool.hpp"
#include "core/env.hpp"
#include "lockstep/core/error.hpp"
#include "backend/cuda_loader.hpp"

namespace lockstep::backend {

namespace {
const KernelTable kNoKernels{};
const DeviceOps kNoDeviceOps{};

// ---- Emulated GPUs: the device boundary tested where no GPU is ----
// With LOCKSTEP_EMULATED_GPUS=N (up to 8) and no real GPU visible (or CUDA not built), gpu:0 ..
// gpu:N-1 exist: devices of kind kCuda whose memory is host memory and whose kernels and copies
// are the CPU's (copies "beside" the work are done at once). Everything that depends on where a tensor lives -- which
// device a model's variables are on, the copies at the boundary, fit's uploads ahead, the writers
// -- then runs as on a GPU, so the gpu tests can run in CI (ctest's gpu.emulated). CUDA itself is
// not tested this way: its kernels, streams and libraries need the real device. Replicas on several
// of them reduce through host memory (the shared-memory group), not NCCL.
int emulated_gpus_from_env() {
  return static_cast<int>(*env::integer("LOCKSTEP_EMULATED_GPUS"));
}

std::atomic<std::int64_t> g_emulated_fences{0};  // recorded and not consumed (emulated_fences_pending)

void* emulated_fence(ComputeContext&, bool) {
  static char mark;  // work on an emulated GPU is done when queued: every fence has passed
  g_emulated_fences.fetch_add(1, std::memory_order_relaxed);
  return &mark;
}
// Copies beside the work go through staging blocks as on CUDA (cuda/staging.cpp): a pool over
// host memory, whose fences have always passed (an emulated copy is done when queued).
class HostBlocks final : public StagingPool::Ops {
 public:
  void* allocate(std::size_t bytes) override { return ::operator new(bytes, std::nothrow); }
  void free(void* block) override { ::operator delete(block); }
  void* make_fence() override { return nullptr; }
  bool passed(void*) override { return true; }
  void wait(void*) override {}
};
StagingPool& emulated_staging() {
  static auto* pool = new StagingPool(std::make_unique<HostBlocks>(), std::size_t{16} << 20, std::size_t{64} << 20);
  return *pool;  // leaked, as a GPU's is
}
std::atomic<std::int64_t> g_emulated_staging_copies{0};  // host copies into a block (emulated_staging_copies)
std::atomic<std::int64_t> g_emulated_copies_beside{0};   // transfers to the device (emulated_copies_beside)
std::atomic<std::int64_t> g_emulated_queue_waits{0};  // emulated_queue_waits

StagedHost emulated_acquire(ComputeContext&, std::size_t bytes) { return emulated_staging().lend(bytes); }
void emulated_release(StagedHost block) { StagingPool::reclaim(block); }
void emulated_fill(StagedHost block, std::size_t offset, const void* host, std::size_t bytes) {
  std::memcpy(static_cast<char*>(block.host) + offset, host, bytes);  // the host's copy into the block, as on CUDA
  g_emulated_staging_copies.fetch_add(1, std::memory_order_relaxed);
}
void emulated_copy_staged(ComputeContext& ctx, void* dst, StagedHost block, std::size_t bytes, void* after) {
  const std::unique_ptr<StagingPool::Lease> lease = StagingPool::reclaim(block);  // back to the pool, thrown or not
  emulated::refuse_host_copy_in_capture(ctx, bytes);  // as copy_from_host_beside: the block's copy is one too
  if (after) g_emulated_fences.fetch_sub(1, std::memory_order_relaxed);
  if (bytes) cpu::device_ops().copy_from_host(ctx, dst, block.host, bytes);
  g_emulated_copies_beside.fetch_add(1, std::memory_order_relaxed);
}
void emulated_copy_beside(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes, void* after) {
  const StagedHost block = emulated_acquire(ctx, bytes);
  if (!block.host) {
    if (after) g_emulated_fences.fetch_sub(1, std::memory_order_relaxed);
    if (bytes) cpu::device_ops().copy_from_host(ctx, dst, host, bytes);
    g_emulated_copies_beside.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  emulated_fill(block, 0, host, bytes);
  emulated_copy_staged(ctx, dst, block, bytes, after);
}
void emulated_wait(ComputeContext&, void*) { g_emulated_fences.fetch_sub(1, std::memory_order_relaxed); }
void emulated_use_stream(ComputeContext&, int) {}  // one queue: the host's, in order

const StagedCopyOps kEmulatedStaged{
    .acquire = emulated_acquire, .copy_beside = emulated_copy_staged, .release = emulated_release};

const DeviceOps& emulated_device_ops() {
  static const DeviceOps ops = [] {
    DeviceOps o = cpu::device_ops();
    o.record_fence = emulated_fence;
    o.copy_from_host_beside = emulated_copy_beside;
    o.wait_fence = emulated_wait;
    o.use_stream = emulated_use_stream;
    return emulated::capturing_ops(o);
  }();
  return ops;
}

// ---- the rows: one per device kind ----
class CpuKind final : public DeviceKindBackend {
 public:
  bool available() const override { return true; }
  int count() const override { return 1; }
  std::string name(int) const override { return "CPU, " + std::to_string(available_cores()) + " cores"; }
  const KernelTable& kernels(DType dtype) const override { return cpu::table(dtype); }
  const DeviceOps& device_ops() const override { return cpu::device_ops(); }
  std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options) const override {
    return std::make_unique<ComputeContext>(device, options.threads, options.cpus);
  }
  std::string capture_refusal() const override {
    return "the CPU runs each kernel on the host as it is called: there is no device queue to capture";
  }
};

// GPUs: CUDA's (src/backend/cuda, the plugin cuda_loader.cpp loads) when built and a GPU is
// visible, else the emulated ones. Without a GPU nothing of CUDA is loaded: no GPU, no tensor there.
int real_cuda_device_count() { return cuda_loader::gpu_count(); }

class GpuKind final : public DeviceKindBackend {
 public:
  bool available() const override { return cuda_loader::built() || emulated(); }
  bool emulated() const override { return emulated_gpus() > 0; }
  int count() const override { return emulated() ? emulated_gpus() : real_cuda_device_count(); }
  std::string name(int index) const override {
    if (emulated()) return "emulated GPU (host memory, CPU kernels)";
    return real() ? cuda_loader::api().device_name(index) : std::string{};
  }
  std::optional<double> utilization_percent(int index) const override {
    return real() ? cuda_loader::api().utilization_percent(index) : std::nullopt;
  }
  std::string runtime_summary() const override {
    if (emulated()) return "emulated (LOCKSTEP_EMULATED_GPUS)";
    if (!cuda_loader::built()) return {};
    if (!real()) return "CUDA backend not loaded: no GPU visible to the NVIDIA driver";
    try {
      return cuda_loader::api().runtime_summary();
    } catch (const ValueError& e) {
      return e.what();  // a report's line: the broken plugin, named
    }
  }
  std::string capture_refusal() const override {
    if (emulated()) return {};  // captured as CUDA would, recorded on the host (emulated_capture.hpp)
    if (!cuda_loader::built()) return "this build has no CUDA backend";
    if (!real()) return "no GPU is visible to the NVIDIA driver";
    return cuda_loader::api().capture_refusal();
  }
  void* stream(ComputeContext& ctx) const override {
    return real() && ctx.device().kind == DeviceKind::kCuda ? cuda_loader::api().stream_of(ctx) : nullptr;
  }
  bool wait_for_queue(ComputeContext& ctx) const override {
    if (emulated()) {  // its work is done when queued, unless a capture records it
      g_emulated_queue_waits.fetch_add(1, std::memory_order_relaxed);
      return !emulated::recorded(ctx);
    }
    return !real() || ctx.device().kind != DeviceKind::kCuda || cuda_loader::api().wait_for_queue(ctx);
  }
  const KernelTable& kernels(DType dtype) const override {
    if (emulated()) return emulated::kernels(dtype);
    return real() ? cuda_loader::api().table(dtype) : kNoKernels;
  }
  const DeviceOps& device_ops() const override {
    if (emulated()) return emulated_device_ops();
    return real() ? cuda_loader::api().device_ops() : kNoDeviceOps;
  }
  const StagedCopyOps* staged_copy_ops() const {
    if (emulated()) return &kEmulatedStaged;
    return real() ? &cuda_loader::api().staged_copy_ops() : nullptr;
  }
  std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options) const override {
    if (emulated()) {
      LOCKSTEP_CHECK(device.index >= 0 && device.index < emulated_gpus(), "device '", device.str(),
                     "' does not exist: ", emulated_gpus(), " emulated GPU(s)");
      return std::make_unique<ComputeContext>(device, 1);  // host memory, the CPU's kernels
    }
    if (!cuda_loader::built())
      throw ValueError("device '" + device.str() +
                       "': this lockstep was built without CUDA (LOCKSTEP_WITH_CUDA=OFF), so tensors cannot live on "
                       "a GPU; use cpu devices");
    if (!real()) cuda_loader::no_gpu(device);
    return cuda_loader::api().make_context(device, options);
  }

 private:
  // Real GPUs are visible (and CUDA built): the plugin is used.
  static bool real() { return real_cuda_device_count() > 0; }
  static int emulated_gpus() {
    static const int n = real_cuda_device_count() == 0 ? emulated_gpus_from_env() : 0;
    return n;
  }
};

}  // namespace

std::int64_t emulated_fences_pending() { return g_emulated_fences.load(std::memory_order_relaxed); }
std::int64_t emulated_staging_copies() { return g_emulated_staging_copies.load(std::memory_order_relaxed); }
std::int64_t emulated_copies_beside() { return g_emulated_copies_beside.load(std::memory_order_relaxed); }
std::int64_t emulated_queue_waits() { return g_emulated_queue_waits.load(std::memory_order_relaxed); }

// The registry: a device kind's row. A new kind is a backend folder and a row here. The rows are
// leaked: a context destroyed during exit still asks its row to wait for its queue (error_marks.cpp).
const DeviceKindBackend& device_kind(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: {
      static const auto* cpu = new CpuKind;
      return *cpu;
    }
    case DeviceKind::kCuda: {
      static const auto* gpu = new GpuKind;
      return *gpu;
    }
  }
  throw InternalError("unknown device kind");
}

const std::vector<DeviceKind>& device_kinds() {
  static const std::vector<DeviceKind> kinds{DeviceKind::kCuda, DeviceKind::kCpu};
  return kinds;
}

const char* kernel_op_name(KernelOp op) {
  static const char* const names[] = {
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) #name,
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
  };
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<std::size_t>(KernelOp::kCount));
  return names[static_cast<std::size_t>(op)];
}

namespace {
void check_can_capture(const ComputeContext& ctx) {
  const std::string why = device_kind(ctx.device().kind).capture_refusal();
  LOCKSTEP_CHECK(why.empty(), "work on ", ctx.device().str(), " cannot be captured into a graph: ", why);
}

// Only a device whose kind can capture gets here: a GPU, emulated or the loaded plugin's.
bool emulated_gpu(const ComputeContext& ctx) {
  return ctx.device().kind == DeviceKind::kCuda && device_kind(DeviceKind::kCuda).emulated();
}
}  // namespace

void begin_capture(ComputeContext& ctx) {
  check_can_capture(ctx);
  if (emulated_gpu(ctx)) return emulated::begin_capture(ctx);
  cuda_loader::api().begin_capture(ctx);
}
std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep) {
  check_can_capture(ctx);
  if (emulated_gpu(ctx)) return emulated::end_capture(ctx, keep);
  return cuda_loader::api().end_capture(ctx, keep);
}
void replay_graph(ComputeContext& ctx, void* graph) {
  check_can_capture(ctx);
  if (emulated_gpu(ctx)) return emulated::replay(ctx, graph);
  cuda_loader::api().replay(ctx, graph);
}

bool kernel_returns_to_host(KernelOp op) {
  static constexpr bool returns_to_host[] = {
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) !std::is_void_v<ret>,
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
  };
  return returns_to_host[static_cast<std::size_t>(op)];
}

const char* kernel_capture_refusal(DeviceKind kind, KernelOp op) {
  (void)kind;  // every device kind that captures can repeat every kernel that stays on the device
  return kernel_returns_to_host(op) ? "returns its result to the host" : nullptr;
}

bool backend_available(DeviceKind kind) { return device_kind(kind).available(); }
const KernelTable& kernels(DeviceKind kind, DType dtype) { return device_kind(kind).kernels(dtype); }
const DeviceOps& device_ops(DeviceKind kind) { return device_kind(kind).device_ops(); }
const StagedCopyOps* staged_copy_ops(DeviceKind kind) {
  if (kind != DeviceKind::kCuda) return nullptr;
  return static_cast<const GpuKind&>(device_kind(kind)).staged_copy_ops();
}
void fill_staged(DeviceKind kind, StagedHost block, std::size_t offset, const void* host, std::size_t bytes) {
  if (device_kind(kind).emulated()) return emulated_fill(block, offset, host, bytes);
  std::memcpy(static_cast<char*>(block.host) + offset, host, bytes);
}

bool supports(DeviceKind kind, DType dtype, KernelOp op) {
  const KernelTable& t = kernels(kind, dtype);
  switch (op) {
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) \
  case KernelOp::Op: return t.name != nullptr;
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
    case KernelOp::kCount: break;
  }
  return false;
}

std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options) {
  return device_kind(device.kind).make_context(device, options);
}

}  // namespace lockstep::backend
