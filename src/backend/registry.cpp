// The one place that knows which backends exist. An optional backend adds its #ifdef here.
#include <cstdlib>
#include <string>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/devices.hpp"
#include "core/env.hpp"
#include "lockstep/core/error.hpp"
#ifdef LOCKSTEP_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

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

void* emulated_fence(ComputeContext&, bool) {
  static char mark;  // work on an emulated GPU is done when queued: every fence has passed
  return &mark;
}
void emulated_copy_beside(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes, void*) {
  if (bytes) cpu::device_ops().copy_from_host(ctx, dst, host, bytes);
}
void emulated_wait(ComputeContext&, void*) {}

const DeviceOps& emulated_device_ops() {
  static const DeviceOps ops = [] {
    DeviceOps o = cpu::device_ops();
    o.record_fence = emulated_fence;
    o.copy_from_host_beside = emulated_copy_beside;
    o.wait_fence = emulated_wait;
    return o;
  }();
  return ops;
}
}  // namespace

// ---- CUDA (src/backend/cuda) when built ----
#ifdef LOCKSTEP_WITH_CUDA
constexpr bool kWithCuda = true;
int real_cuda_device_count() { return cuda::device_count(); }
#else
constexpr bool kWithCuda = false;
int real_cuda_device_count() { return 0; }
#endif

int emulated_gpus() {
  static const int n = real_cuda_device_count() == 0 ? emulated_gpus_from_env() : 0;
  return n;
}
bool gpus_emulated() { return emulated_gpus() > 0; }

int cuda_device_count() { return gpus_emulated() ? emulated_gpus() : real_cuda_device_count(); }
// Each answers for the emulated GPUs first, then for the CUDA backend when built.
std::string cuda_device_name([[maybe_unused]] int index) {
  if (gpus_emulated()) return "emulated GPU (host memory, CPU kernels)";
#ifdef LOCKSTEP_WITH_CUDA
  return cuda::device_name(index);
#else
  return {};
#endif
}
std::optional<double> cuda_utilization_percent([[maybe_unused]] int index) {
  if (gpus_emulated()) return std::nullopt;
#ifdef LOCKSTEP_WITH_CUDA
  return cuda::utilization_percent(index);
#else
  return std::nullopt;
#endif
}
std::string cuda_runtime_summary() {
  if (gpus_emulated()) return "emulated (LOCKSTEP_EMULATED_GPUS)";
#ifdef LOCKSTEP_WITH_CUDA
  return cuda::runtime_summary();
#else
  return {};
#endif
}
void* cuda_stream(ComputeContext& ctx) {
  if (gpus_emulated() || ctx.device().kind != DeviceKind::kCuda) return nullptr;
#ifdef LOCKSTEP_WITH_CUDA
  return cuda::stream_of(ctx);
#else
  return nullptr;
#endif
}

const char* kernel_op_name(KernelOp op) {
  static const char* names[] = {"fill", "cast", "cast_scaled", "compare", "gather_rows", "gather_rows_scaled",
                                "scatter_add_rows",
                                "combine", "argmax", "gemm", "unary", "unary_backward", "binary", "reduce_sum", "reduce_max",
                                "reduce_max_backward", "softmax", "softmax_backward", "bias_activation",
                                "sparse_softmax_xent", "sparse_softmax_xent_backward", "one_hot", "dropout_mask",
                                "sum_squares", "scale_clip", "sgd_update", "adam_update", "sgd_update_summed",
                                "adam_update_summed", "first_outside",
                                "conv2d", "conv2d_backward_data", "conv2d_backward_weights", "pool2d",
                                "pool2d_backward", "conv2d_max_pool2d", "conv2d_max_pool2d_backward_weights",
                                "max_unpool2d", "batch_norm_reduce", "batch_norm_apply", "batch_norm_backward"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<std::size_t>(KernelOp::kCount));
  return names[static_cast<std::size_t>(op)];
}

bool backend_available(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return true;
    case DeviceKind::kCuda: return kWithCuda || gpus_emulated();
  }
  return false;
}

const KernelTable& kernels(DeviceKind kind, DType dtype) {
  switch (kind) {
    case DeviceKind::kCpu: return cpu::table(dtype);
    case DeviceKind::kCuda:
      if (gpus_emulated()) return cpu::table(dtype);
#ifdef LOCKSTEP_WITH_CUDA
      return cuda::table(dtype);
#else
      return kNoKernels;
#endif
  }
  return kNoKernels;
}

const DeviceOps& device_ops(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return cpu::device_ops();
    case DeviceKind::kCuda:
      if (gpus_emulated()) return emulated_device_ops();
#ifdef LOCKSTEP_WITH_CUDA
      return cuda::device_ops();
#else
      return kNoDeviceOps;
#endif
  }
  return kNoDeviceOps;
}

bool supports(DeviceKind kind, DType dtype, KernelOp op) {
  const KernelTable& t = kernels(kind, dtype);
  switch (op) {
    case KernelOp::kFill: return t.fill;
    case KernelOp::kCast: return t.cast;
    case KernelOp::kCastScaled: return t.cast_scaled;
    case KernelOp::kCompare: return t.compare;
    case KernelOp::kGatherRows: return t.gather_rows;
    case KernelOp::kGatherRowsScaled: return t.gather_rows_scaled;
    case KernelOp::kScatterAddRows: return t.scatter_add_rows;
    case KernelOp::kCombine: return t.combine;
    case KernelOp::kArgmax: return t.argmax;
    case KernelOp::kGemm: return t.gemm;
    case KernelOp::kUnary: return t.unary;
    case KernelOp::kUnaryBackward: return t.unary_backward;
    case KernelOp::kBinary: return t.binary;
    case KernelOp::kReduceSum: return t.reduce_sum;
    case KernelOp::kReduceMax: return t.reduce_max;
    case KernelOp::kReduceMaxBackward: return t.reduce_max_backward;
    case KernelOp::kSoftmax: return t.softmax;
    case KernelOp::kSoftmaxBackward: return t.softmax_backward;
    case KernelOp::kBiasActivation: return t.bias_activation;
    case KernelOp::kSparseSoftmaxXent: return t.sparse_softmax_xent;
    case KernelOp::kSparseSoftmaxXentBackward: return t.sparse_softmax_xent_backward;
    case KernelOp::kOneHot: return t.one_hot;
    case KernelOp::kDropoutMask: return t.dropout_mask;
    case KernelOp::kSumSquares: return t.sum_squares;
    case KernelOp::kScaleClip: return t.scale_clip;
    case KernelOp::kSgdUpdate: return t.sgd_update;
    case KernelOp::kAdamUpdate: return t.adam_update;
    case KernelOp::kSgdUpdateSummed: return t.sgd_update_summed;
    case KernelOp::kAdamUpdateSummed: return t.adam_update_summed;
    case KernelOp::kFirstOutside: return t.first_outside;
    case KernelOp::kConv2d: return t.conv2d;
    case KernelOp::kConv2dBackwardData: return t.conv2d_backward_data;
    case KernelOp::kConv2dBackwardWeights: return t.conv2d_backward_weights;
    case KernelOp::kPool2d: return t.pool2d;
    case KernelOp::kPool2dBackward: return t.pool2d_backward;
    case KernelOp::kConv2dMaxPool2d: return t.conv2d_max_pool2d;
    case KernelOp::kConv2dMaxPool2dBackwardWeights: return t.conv2d_max_pool2d_backward_weights;
    case KernelOp::kMaxUnpool2d: return t.max_unpool2d;
    case KernelOp::kBatchNormReduce: return t.batch_norm_reduce;
    case KernelOp::kBatchNormApply: return t.batch_norm_apply;
    case KernelOp::kBatchNormBackward: return t.batch_norm_backward;
    case KernelOp::kCount: break;
  }
  return false;
}

std::unique_ptr<ComputeContext> make_context(Device device, const ContextOptions& options) {
  switch (device.kind) {
    case DeviceKind::kCpu: return std::make_unique<ComputeContext>(device, options.threads, options.cpus);
    case DeviceKind::kCuda:
      if (gpus_emulated()) {
        LOCKSTEP_CHECK(device.index >= 0 && device.index < emulated_gpus(), "device '", device.str(),
                       "' does not exist: ", emulated_gpus(), " emulated GPU(s)");
        return std::make_unique<ComputeContext>(device, 1);  // host memory, the CPU's kernels
      }
#ifdef LOCKSTEP_WITH_CUDA
      return cuda::make_context(device, options);
#else
      throw ValueError("device '" + device.str() +
                       "': this lockstep was built without CUDA (LOCKSTEP_WITH_CUDA=OFF), so tensors cannot live on "
                       "a GPU; use cpu devices");
#endif
  }
  throw InternalError("unknown device kind");
}

}  // namespace lockstep::backend
