#pragma once
// Host-side state of the CUDA backend: error checks that throw lockstep's errors, the device
// state a context points to, and scratch memory. Plain C++ over the CUDA runtime (no kernels),
// so that the files without kernels compile with the host compiler.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/gemm_key.hpp"
#include "backend/kernels.hpp"
#include "backend/staging_pool.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::cuda {

/// Throws InternalError naming `what` and CUDA's message unless `e` is cudaSuccess.
void check(cudaError_t e, const char* what);
void check(cublasStatus_t s, const char* what);
/// After a launch: a bad configuration is reported here, a fault at the next synchronisation.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

/// The cuDNN library's version (major.minor.patch) and the one these headers are from (conv.cu).
std::string cudnn_version();
/// Whether NVML could be loaded and initialised (nvml.cpp).
bool nvml_available();

/// Whether float32 GEMMs and convolutions may use TF32 tensor cores (LOCKSTEP_CUDA_TF32=1):
/// TF32 keeps 10 mantissa bits, far outside float32's parity tolerance, so it is opt-in.
bool tf32_allowed();

struct GemmPlan;  // gemm.cu; kept per GemmKey (gemm_key.hpp)

struct CudaDevice;

/// One of a GPU's queues of work: a compute stream, a copy stream beside it and a cuBLASLt handle
/// with its workspace. Lane 0 is the one every context of the device queues on (so work from
/// several contexts, and the collectives between them, runs in the order the host issued it, and
/// memory freed on the host is reused only by work queued after it); while a strategy runs a step,
/// each further logical replica of the GPU queues on a lane of its own (use_stream), joined to
/// lane 0 by events before and after the step and to its peers by the collectives' barriers.
struct CudaLane {
  CudaDevice* device = nullptr;
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // cuBLASLt's, used by one GEMM at a time (the stream orders them)
  std::size_t workspace_bytes = 0;
  // Held while a GEMM is queued: one cublasLtMatmul may queue several kernels that share the
  // workspace (split-K and its reduction, a clear of stream-K's counters), and several threads
  // may queue on one lane; without it their kernels could interleave.
  std::mutex gemm_mu;
  // Copies started ahead of their use (DeviceOps::copy_from_host_beside) run here, beside the
  // compute stream, ordered against it by events.
  cudaStream_t copy_stream = nullptr;
  // While the stream is in a graph capture: the one thread whose work it records (the thread that
  // began the capture, or the one that joined this lane to it: note_capture) and CUDA's id of the
  // capture; no thread otherwise. lane() refuses every other thread's work here: CUDA would record
  // it into that capture's graph (the device's contexts share lane 0).
  std::atomic<std::thread::id> captured_by{};
  std::atomic<unsigned long long> capture_id{0};
};

/// One per physical GPU, made on first use and kept for the process (as the CUDA runtime's
/// own per-device state is), with its lanes.
struct CudaDevice {
  static constexpr int kMaxLanes = 64;  // gpu:NxK allows K <= 64
  int index = 0;
  std::string name;
  std::mutex plans_mu;
  std::map<GemmKey, GemmPlan*> plans;  // leaked with the device; a plan serves every lane
  // Pinned blocks that host-to-device copies go through, so that the host does not wait for
  // them (staging.cpp).
  StagingPool* staging = nullptr;
  std::mutex events_mu;
  std::vector<cudaEvent_t> free_events;  // for fences; leaked with the device
  std::mutex lanes_mu;
  CudaLane* lanes[kMaxLanes] = {};  // made on first use (lane_state), leaked with the device
  std::atomic<int> captured_lanes{0};  // lanes with captured_by set: a wait_fence looks for a join only then
};

/// The staging pool of GPU `device` (made with its state).
std::unique_ptr<StagingPool> make_staging_pool(int device);
/// Copies host memory to `dst` on `stream` through the device's pinned staging blocks: the host
/// waits neither for the transfer nor for the work queued before it (only, when every block is
/// in flight, for the oldest). Without pinned memory it copies directly and waits.
void copy_host_to_device(CudaDevice& d, cudaStream_t stream, void* dst, const void* host, std::size_t bytes);
/// Refuses (ValueError, in the emulated GPUs' words) a copy of `bytes` from the host to the device
/// while lane `l`'s stream is captured: a replay could not repeat it (cuda_context.cpp).
void refuse_host_copy_in_capture(const CudaLane& l, std::size_t bytes);
/// An event of the device's pool (DisableTiming) and its return.
cudaEvent_t take_event(CudaDevice& d);
void give_event(CudaDevice& d, cudaEvent_t e);

/// The lane a CUDA context queues on; makes its GPU current on the calling thread. Refuses
/// (ValueError) a thread other than the one whose work the lane's capture records (captured_by).
CudaLane& lane(ComputeContext& ctx);
/// Lane `l`'s stream is in a capture (begun on it, or joined to one by a wait for its event): its
/// captured_by is the calling thread from now until forget_capture (graph.cpp). Nothing where it
/// is not capturing or is noted already.
void note_capture(CudaLane& l);
/// The capture begun on `origin` ended: its lanes and those that joined it capture no more.
void forget_capture(CudaLane& origin);
inline CudaDevice& device(ComputeContext& ctx) { return *lane(ctx).device; }
inline cudaStream_t stream(ComputeContext& ctx) { return lane(ctx).stream; }
/// Device state of GPU `index` (made on first use); throws ValueError when there is none.
CudaDevice& device_state(int index);
/// Lane `k` of GPU `index` (made on first use: two streams, a cuBLASLt handle, its workspace).
CudaLane& lane_state(int index, int k);

/// Device memory for a kernel's scratch (partial sums, a result to read back), from the
/// context's allocator; released when it goes out of scope (work queued after on the same
/// stream may reuse it, which the stream orders).
class Scratch {
 public:
  Scratch(ComputeContext& ctx, std::size_t bytes) : alloc_(ctx.allocator()), bytes_(bytes), p_(alloc_.allocate(bytes)) {}
  ~Scratch() { alloc_.release(p_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  Allocator& alloc_;
  std::size_t bytes_;
  void* p_;
};

/// Copies `bytes` from device memory to the host and waits for it (and everything before it).
void read_back(ComputeContext& ctx, void* host, const void* dev, std::size_t bytes);

}  // namespace lockstep::backend::cuda
