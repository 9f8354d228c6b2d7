// Device discovery, per-device state (stream, cuBLASLt handle), contexts and the CUDA
// DeviceOps. No driver or no GPU means zero devices, never an error: the CPU backend is
// always there; asking for gpu:N that does not exist is a ValueError naming it.
#include <cuda_runtime.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend/cuda/cuda_allocator.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "core/env.hpp"

namespace lockstep::backend::cuda {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw InternalError(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ")");
}

void check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw InternalError(std::string("cuBLASLt error in ") + what + ": status " + std::to_string(static_cast<int>(s)));
}

bool tf32_allowed() {
  static const bool on = [] {
    return env::flag("LOCKSTEP_CUDA_TF32");
  }();
  return on;
}

namespace {
// cudaGetDeviceCount's answer, asked once: the devices a process sees do not change while it runs.
struct Counted {
  int n = 0;
  cudaError_t error = cudaSuccess;
};
const Counted& counted() {
  static const Counted c = [] {
    Counted r;
    r.error = cudaGetDeviceCount(&r.n);
    if (r.error != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: clear the sticky error
      r.n = 0;
    }
    return r;
  }();
  return c;
}
}  // namespace

int device_count() { return counted().n; }

std::string runtime_summary() {
  const auto v = [](int n) { return std::to_string(n / 1000) + "." + std::to_string(n % 1000 / 10); };
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  (void)cudaGetLastError();
  return std::string("CUDA driver ") + (driver ? v(driver) : "none") + ", runtime " + (runtime ? v(runtime) : "?") +
         ", cuDNN " + cudnn_version() + ", NVML: " + (nvml_available() ? "yes" : "no");
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    (void)cudaGetLastError();
    return "CUDA device";
  }
  return std::string(prop.name) + ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB, sm_" +
         std::to_string(prop.major) + std::to_string(prop.minor);
}

namespace {
constexpr int kMaxDevices = 64;
std::mutex g_devices_mu;
std::array<CudaDevice*, kMaxDevices> g_devices{};  // leaked: tensors in statics outlive any order

void no_such_device(int index, int count) {
  // The driver may see GPUs the runtime cannot use (a driver older than the runtime): CUDA's reason.
  const cudaError_t e = counted().error;
  const std::string why = e == cudaSuccess || e == cudaErrorNoDevice
                              ? " (no NVIDIA driver or GPU, or CUDA_VISIBLE_DEVICES hides them)"
                              : std::string(" (the CUDA runtime cannot use them: ") + cudaGetErrorName(e) + ", " +
                                    cudaGetErrorString(e) + ")";
  throw ValueError("device 'gpu:" + std::to_string(index) + "' does not exist: this machine has " +
                   std::to_string(count) + " GPU(s) visible to CUDA" +
                   (count == 0 ? why : " (gpu:0 .. gpu:" + std::to_string(count - 1) + ")") +
                   "; use cpu devices or another GPU");
}
}  // namespace

CudaDevice& device_state(int index) {
  const int count = device_count();
  if (index < 0 || index >= count || index >= kMaxDevices) no_such_device(index, count);
  std::lock_guard<std::mutex> lock(g_devices_mu);
  if (!g_devices[static_cast<std::size_t>(index)]) {
    auto d = std::make_unique<CudaDevice>();
    d->index = index;
    d->name = device_name(index);
    check(cudaSetDevice(index), "cudaSetDevice");
    d->staging = make_staging_pool(index).release();  // leaked with the device
    g_devices[static_cast<std::size_t>(index)] = d.release();
  }
  return *g_devices[static_cast<std::size_t>(index)];
}

CudaLane& lane_state(int index, int k) {
  CudaDevice& d = device_state(index);
  if (k < 0 || k >= CudaDevice::kMaxLanes)
    throw InternalError("stream " + std::to_string(k) + " of gpu:" + std::to_string(index) + " asked for: a GPU has " +
                        std::to_string(CudaDevice::kMaxLanes) + " (0 .. " + std::to_string(CudaDevice::kMaxLanes - 1) +
                        ")");
  std::lock_guard<std::mutex> lock(d.lanes_mu);
  CudaLane*& slot = d.lanes[k];
  if (!slot) {
    auto l = std::make_unique<CudaLane>();
    l->device = &d;
    l->index = k;
    check(cudaSetDevice(index), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&l->copy_stream, cudaStreamNonBlocking), "cudaStreamCreate (copies)");
    check(cublasLtCreate(&l->lt), "cublasLtCreate");
    l->workspace_bytes = std::size_t{32} << 20;  // what cuBLAS itself reserves on Hopper
    check(cudaMalloc(&l->workspace, l->workspace_bytes), "cudaMalloc (cuBLASLt workspace)");
    slot = l.release();
  }
  return *slot;
}

namespace {
// Work queued on a lane whose stream a capture records, by a thread other than the capture's: CUDA
// would record it into that capture's graph (every context of the GPU queues on lane 0) instead of
// running it now. Refused in the emulated GPUs' words (emulated_capture.cpp: refuse); one
// atomic load where no capture is under way.
void refuse_foreign(const CudaLane& l) {
  const std::thread::id by = l.captured_by.load(std::memory_order_acquire);
  if (by == std::thread::id{} || by == std::this_thread::get_id()) [[likely]]
    return;
  const std::string gpu = "gpu:" + std::to_string(l.device->index);
  throw ValueError("work on " + gpu + " (stream " + std::to_string(l.index) +
                   ") queued by a thread other than the capture's inside a graph capture on " + gpu +
                   ": it would be recorded into that capture's graph instead of running now (a capture records what "
                   "any thread queues on its stream, which every context of the device shares); queue it before the "
                   "capture begins or after it ends");
}
}  // namespace

CudaLane& lane(ComputeContext& ctx) {
  auto* l = static_cast<CudaLane*>(ctx.native());
  if (!l) throw InternalError("a CUDA kernel ran on the non-CUDA context of " + ctx.device().str());
  refuse_foreign(*l);
  // Cheap when it is current already; a thread may serve contexts of several GPUs.
  check(cudaSetDevice(l->device->index), "cudaSetDevice");
  return *l;
}

void* stream_of(ComputeContext& ctx) { return stream(ctx); }

bool wait_for_queue(ComputeContext& ctx) {
  auto* l = static_cast<CudaLane*>(ctx.native());
  if (!l) return true;
  // A captured stream's work does not run until a replay, and a synchronisation would invalidate
  // the capture: no wait there. Nor where CUDA fails (a fault, the runtime unloading at exit).
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  bool done = cudaSetDevice(l->device->index) == cudaSuccess &&
              cudaStreamIsCapturing(l->stream, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone;
  if (done) {
    // In relaxed mode, as the allocator's cudaMalloc: the thread may be capturing another stream.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
    done = cudaStreamSynchronize(l->stream) == cudaSuccess;
    if (relaxed) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  }
  if (!done) (void)cudaGetLastError();
  return done;
}

std::unique_ptr<ComputeContext> make_context(Device dev, const ContextOptions& options) {
  CudaLane& l = lane_state(dev.index, 0);
  auto alloc = std::make_shared<CudaCachingAllocator>(CudaMemory{dev.index, dev.str() + " (" + l.device->name + ")"},
                                                      options.memory_limit);
  return std::make_unique<ComputeContext>(dev, std::move(alloc), &l);
}

namespace {
// What a graph's replay could not repeat, asked for while the lane's stream is captured: a copy
// from the host (CUDA would record the transfer out of a pinned staging block that later copies
// refill, and leave the block's fence an event last recorded in a capture, which cudaEventQuery
// refuses from then on: cudaErrorCapturedEvent), or a read the host waits for (CUDA fails the
// synchronisation and invalidates the capture). Refused before CUDA sees it, in the emulated
// GPUs' words (emulated_capture.cpp).
void refuse_in_capture(cudaStream_t s, int device, const std::string& what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
  if (status == cudaStreamCaptureStatusNone) [[likely]]
    return;
  throw ValueError(what + " inside a graph capture on gpu:" + std::to_string(device) + ": a replay could not repeat it");
}
std::string bytes_between(std::size_t bytes, const char* direction) {
  return "a copy of " + std::to_string(bytes) + " bytes " + direction;
}
}  // namespace

void refuse_host_copy_in_capture(const CudaLane& l, std::size_t bytes) {
  refuse_in_capture(l.stream, l.device->index, bytes_between(bytes, "from the host to the device"));
}

void read_back(ComputeContext& ctx, void* host, const void* dev, std::size_t bytes) {
  CudaLane& l = lane(ctx);
  refuse_in_capture(l.stream, l.device->index,
                    "a kernel's result of " + std::to_string(bytes) + " bytes read on the host");
  cudaStream_t s = l.stream;
  check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (to host)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

namespace {
int device_of_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice ? attr.device : -1;
}

// DeviceOps may run with a CPU context current (a host thread assigning a variable's GPU
// copy, reading a result): then on lane 0 of the GPU that holds the memory.
CudaLane& lane_for(ComputeContext& ctx, const void* dev_ptr) {
  if (ctx.native()) return lane(ctx);
  const int idx = device_of_pointer(dev_ptr);
  if (idx < 0) throw InternalError("a CUDA memory operation on " + ctx.device().str() + " got a pointer that is not "
                                   "GPU memory");
  CudaLane& l = lane_state(idx, 0);
  refuse_foreign(l);
  check(cudaSetDevice(idx), "cudaSetDevice");
  return l;
}

void copy(ComputeContext& ctx, void* dst, const void* src, std::size_t bytes) {
  if (!bytes || dst == src) return;
  CudaLane& l = lane_for(ctx, dst);
  const int index = l.device->index;
  // Between two GPUs (a broadcast from replica 0): the source's stream may still be writing it,
  // and the copy must be done before that device reuses the block.
  int other = -1;
  if (device_count() > 1) {
    const int from = device_of_pointer(src), to = device_of_pointer(dst);
    other = from >= 0 && from != index ? from : to >= 0 && to != index ? to : -1;
  }
  if (other >= 0) {  // one replica per GPU there (device_layout): its work is on lane 0
    check(cudaStreamSynchronize(lane_state(other, 0).stream), "cudaStreamSynchronize (peer)");
    check(cudaSetDevice(index), "cudaSetDevice");
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, l.stream), "cudaMemcpyAsync (device to device)");
  if (other >= 0) check(cudaStreamSynchronize(l.stream), "cudaStreamSynchronize");
}

void copy_to_host(ComputeContext& ctx, void* host, const void* src, std::size_t bytes) {
  if (!bytes) return;
  const CudaLane& l = lane_for(ctx, src);
  refuse_in_capture(l.stream, l.device->index, bytes_between(bytes, "from the device to the host"));
  cudaStream_t s = l.stream;
  check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (to host)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void copy_from_host(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes) {
  if (!bytes) return;
  CudaLane& l = lane_for(ctx, dst);
  refuse_host_copy_in_capture(l, bytes);
  copy_host_to_device(*l.device, l.stream, dst, host, bytes);
}

void* record_fence(ComputeContext& ctx, bool copy_stream) {
  CudaLane& l = lane(ctx);
  cudaEvent_t e = take_event(*l.device);
  check(cudaEventRecord(e, copy_stream ? l.copy_stream : l.stream), "cudaEventRecord (fence)");
  return e;
}

void copy_from_host_beside(ComputeContext& ctx, void* dst, const void* host, std::size_t bytes, void* after) {
  CudaLane& l = lane(ctx);
  // Waiting for a fence of a capture would pull the copy stream into it too.
  refuse_host_copy_in_capture(l, bytes);
  if (after) {
    // The wait takes the event's state now: the event may go back to the pool at once.
    check(cudaStreamWaitEvent(l.copy_stream, static_cast<cudaEvent_t>(after), 0), "cudaStreamWaitEvent (copy)");
    give_event(*l.device, static_cast<cudaEvent_t>(after));
  }
  if (bytes) copy_host_to_device(*l.device, l.copy_stream, dst, host, bytes);
}

void wait_fence(ComputeContext& ctx, void* fence) {
  CudaLane& l = lane(ctx);
  check(cudaStreamWaitEvent(l.stream, static_cast<cudaEvent_t>(fence), 0), "cudaStreamWaitEvent (compute)");
  give_event(*l.device, static_cast<cudaEvent_t>(fence));
  // A wait for an event of a capture joins the stream to it (a fork): its work is this thread's.
  if (l.device->captured_lanes.load(std::memory_order_acquire) != 0) [[unlikely]]
    note_capture(l);
}

void use_stream(ComputeContext& ctx, int k) {
  CudaLane& from = lane(ctx);
  CudaLane& to = lane_state(from.device->index, k);
  if (&to == &from) return;
  // The new lane's work waits for what the context queued on the old one (and for everything
  // else queued there before now): recorded before it is waited on, and given back once the
  // wait is queued (a wait takes the event's state when it is called).
  cudaEvent_t e = take_event(*from.device);
  check(cudaEventRecord(e, from.stream), "cudaEventRecord (stream switch)");
  check(cudaStreamWaitEvent(to.stream, e, 0), "cudaStreamWaitEvent (stream switch)");
  give_event(*from.device, e);
  ctx.set_native(&to);
}

// The device's error marks (error_marks.hpp): pinned for every GPU and mapped; with unified
// addressing the device writes the host's address.
void* alloc_host_mapped(std::size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc (error mark)");
  return p;
}

void zero(ComputeContext& ctx, void* dst, std::size_t bytes) {
  if (bytes) check(cudaMemsetAsync(dst, 0, bytes, lane_for(ctx, dst).stream), "cudaMemsetAsync");
}
}  // namespace

bool equal_bytes_on(ComputeContext& ctx, const void* a, const void* b, std::size_t bytes);  // storage.cu
bool equal_bytes(ComputeContext& ctx, const void* a, const void* b, std::size_t bytes) {
  if (bytes == 0 || a == b) return true;
  if (ctx.native()) return equal_bytes_on(ctx, a, b, bytes);
  // A host thread comparing two GPU tensors (check_mirrored): on their GPU's context.
  CudaLane& l = lane_for(ctx, a);
  const int index = l.device->index;
  ComputeContext gpu(Device{DeviceKind::kCuda, index},
                     std::make_shared<CudaCachingAllocator>(CudaMemory{index, "gpu:" + std::to_string(index)}), &l);
  return equal_bytes_on(gpu, a, b, bytes);
}

const DeviceOps& device_ops() {
  static const DeviceOps ops{.copy = copy,
                             .copy_to_host = copy_to_host,
                             .copy_from_host = copy_from_host,
                             .zero = zero,
                             .equal_bytes = equal_bytes,
                             .record_fence = record_fence,
                             .copy_from_host_beside = copy_from_host_beside,
                             .wait_fence = wait_fence,
                             .use_stream = use_stream,
                             .alloc_host_mapped = alloc_host_mapped};
  return ops;
}

}  // namespace lockstep::backend::cuda
