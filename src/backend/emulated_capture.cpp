// Graph capture on emulated GPUs: recording kernel tables generated from the op list, device
// copies recorded or refused, and the recordings replayed in order (emulated_capture.hpp).
#include "backend/emulated_capture.hpp"

#include <atomic>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::emulated {

namespace {

// One capture: the context captured and the work queued on it, in order.
struct Recording {
  ComputeContext* ctx = nullptr;
  std::vector<std::function<void()>> work;
};

// As CUDA's thread-local capture mode: only what this thread queues on the context is captured.
thread_local Recording* t_recording = nullptr;

Recording* capturing(const ComputeContext& ctx) {
  return t_recording && t_recording->ctx == &ctx ? t_recording : nullptr;
}

[[noreturn]] void refuse(const ComputeContext& ctx, const std::string& what) {
  throw ValueError(what + " inside a graph capture on " + ctx.device().str() +
                   ": a replay could not repeat it (CUDA's stream capture fails there too)");
}

template <typename A>
constexpr bool is_pointer_array = std::is_pointer_v<std::remove_cvref_t<A>> &&
                                  std::is_pointer_v<std::remove_pointer_t<std::remove_cvref_t<A>>>;

template <typename Sig>
struct Signature;
template <typename R, typename... A>
struct Signature<R (*)(ComputeContext&, A...)> {
  static constexpr bool returns_value = !std::is_void_v<R>;
  static constexpr bool pointer_arrays = (is_pointer_array<A> || ...);
};

// The recording kernel of one row for one dtype: runs the CPU's kernel, or records it with its
// arguments copied while the context is being captured on this thread.
template <DType D, auto Member, KernelOp Op, typename Sig>
struct Recorded;
template <DType D, auto Member, KernelOp Op, typename R, typename... A>
struct Recorded<D, Member, Op, R (*)(ComputeContext&, A...)> {
  static R call(ComputeContext& ctx, A... a) {
    const auto kernel = cpu::table(D).*Member;
    if (Recording* rec = capturing(ctx)) [[unlikely]] {
      using S = Signature<R (*)(ComputeContext&, A...)>;
      if constexpr (S::returns_value) {
        refuse(ctx, std::string("the kernel ") + kernel_op_name(Op) + ", which returns its result to the host");
      } else if constexpr (S::pointer_arrays) {
        refuse(ctx, std::string("the kernel ") + kernel_op_name(Op) + ", which " + kernel_refusal(Op) + ",");
      } else {
        rec->work.push_back([kernel, &ctx, ... args = std::remove_cvref_t<A>(a)] { kernel(ctx, args...); });
        return;
      }
    }
    return kernel(ctx, a...);
  }
};

template <DType D>
KernelTable recording_table() {
  const KernelTable& cpu = cpu::table(D);
  KernelTable t;
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) \
  if (cpu.name) t.name = &Recorded<D, &KernelTable::name, KernelOp::Op, decltype(KernelTable::name)>::call;
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
  return t;
}

// The emulated device's own memory work, which the capturing ops run or record.
DeviceOps*& base_ops() {
  static DeviceOps* base = nullptr;
  return base;
}

void copy(ComputeContext& ctx, void* dst, const void* src, std::size_t bytes) {
  if (Recording* rec = capturing(ctx)) [[unlikely]] {
    rec->work.push_back([&ctx, dst, src, bytes] { base_ops()->copy(ctx, dst, src, bytes); });
    return;
  }
  base_ops()->copy(ctx, dst, src, bytes);
}
void zero(ComputeContext& ctx, void* dst, std::size_t bytes) {
  if (Recording* rec = capturing(ctx)) [[unlikely]] {
    rec->work.push_back([&ctx, dst, bytes] { base_ops()->zero(ctx, dst, bytes); });
    return;
  }
  base_ops()->zero(ctx, dst, bytes);
}
void copy_to_host(ComputeContext& ctx, void* host, const void* src, std::size_t bytes) {
  if (capturing(ctx)) [[unlikely]]
    refuse(ctx, "a copy of " + std::to_string(bytes) + " bytes from the device to the host");
  base_ops()->copy_to_host(ctx, host, src, bytes);
}
void copy_from_host(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes) {
  if (capturing(ctx)) [[unlikely]]
    refuse(ctx, "a copy of " + std::to_string(bytes) + " bytes from the host to the device");
  base_ops()->copy_from_host(ctx, dst, host, bytes);
}
void copy_from_host_beside(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes, void* after) {
  if (capturing(ctx)) [[unlikely]]
    refuse(ctx, "a copy of " + std::to_string(bytes) + " bytes from the host to the device");
  base_ops()->copy_from_host_beside(ctx, dst, host, bytes, after);
}
bool equal_bytes(ComputeContext& ctx, const void* a, const void* b, std::size_t bytes) {
  if (capturing(ctx)) [[unlikely]] refuse(ctx, "a comparison of two tensors' bytes read on the host");
  return base_ops()->equal_bytes(ctx, a, b, bytes);
}

}  // namespace

const KernelTable& kernels(DType dtype) {
  static const KernelTable f32 = recording_table<DType::kF32>();
  static const KernelTable f16 = recording_table<DType::kF16>();
  static const KernelTable bf16 = recording_table<DType::kBF16>();
  static const KernelTable i32 = recording_table<DType::kI32>();
  static const KernelTable i64 = recording_table<DType::kI64>();
  static const KernelTable u8 = recording_table<DType::kU8>();
  switch (dtype) {
    case DType::kF32: return f32;
    case DType::kF16: return f16;
    case DType::kBF16: return bf16;
    case DType::kI32: return i32;
    case DType::kI64: return i64;
    case DType::kU8: return u8;
  }
  return f32;
}

DeviceOps capturing_ops(const DeviceOps& base) {
  static DeviceOps kept;
  kept = base;
  base_ops() = &kept;
  DeviceOps o = base;
  o.copy = copy;
  o.zero = zero;
  o.copy_to_host = copy_to_host;
  o.copy_from_host = copy_from_host;
  o.copy_from_host_beside = copy_from_host_beside;
  o.equal_bytes = equal_bytes;
  return o;
}

const char* kernel_refusal(KernelOp op) {
  static constexpr bool arrays[] = {
#define LOCKSTEP_KERNEL_OP(name, Op, dtypes, ret, params) \
  Signature<decltype(KernelTable::name)>::pointer_arrays,
#include "backend/kernel_ops.def"
#undef LOCKSTEP_KERNEL_OP
  };
  return arrays[static_cast<std::size_t>(op)]
             ? "takes host arrays of pointers, which an emulated GPU's recording cannot keep"
             : nullptr;
}

void begin_capture(ComputeContext& ctx) {
  LOCKSTEP_CHECK(!t_recording, "a graph capture of ", t_recording ? t_recording->ctx->device().str() : "",
                 " is already under way on this thread: captures do not nest");
  t_recording = new Recording{&ctx, {}};
}

std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep) {
  std::unique_ptr<Recording> rec(t_recording);
  if (!rec || rec->ctx != &ctx) {
    (void)rec.release();
    throw InternalError("end_capture on " + ctx.device().str() + " without its begin_capture on this thread");
  }
  t_recording = nullptr;
  if (!keep) return nullptr;
  return std::shared_ptr<Recording>(std::move(rec));
}

namespace {
std::atomic<std::uint64_t> g_replays{0};
}  // namespace

void replay(ComputeContext&, void* graph) {
  g_replays.fetch_add(1, std::memory_order_relaxed);
  for (const auto& work : static_cast<Recording*>(graph)->work) work();
}

std::uint64_t replays() { return g_replays.load(std::memory_order_relaxed); }

}  // namespace lockstep::backend::emulated
