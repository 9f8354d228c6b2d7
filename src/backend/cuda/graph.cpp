// Capture of the work a CUDA context queues into a CUDA graph, and its replay (jit_compile's
// mechanism). The capture belongs to the context's stream: CUDA records whatever any thread queues
// there, and every context of the GPU queues on lane 0, so each captured lane notes the one thread
// whose work it records (CudaLane::captured_by) and lane() refuses any other's, by name, before
// CUDA sees it. Other streams of the device join it by waiting for an event recorded in it (the
// logical replicas of one GPU: StepGraph's lanes, forked from lane 0 with record_fence and
// wait_fence, their collectives' events becoming the graph's edges, each lane's last event waited
// for on lane 0 before the capture ends; cudaStreamEndCapture fails with
// cudaErrorStreamCaptureUnjoined otherwise). The mode is thread-local: only the thread that began
// the capture (and ends it) may not call what would wait for the device or allocate device memory
// (its cudaMalloc runs in relaxed mode, cuda_allocator.cpp); the lanes' threads queue into their
// joined streams and, like it, take memory for their graph pools. No lane may wait on the host for
// its stream inside the step (a synchronize or query fails the capture): the lanes meet on the host, and
// their streams are ordered by events only.
#include <cuda_runtime.h>

#include <mutex>
#include <thread>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_device.hpp"

namespace lockstep::backend::cuda {

std::string capture_refusal() { return {}; }

void note_capture(CudaLane& l) {
  if (l.captured_by.load(std::memory_order_acquire) != std::thread::id{}) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  check(cudaStreamGetCaptureInfo(l.stream, &status, &id), "cudaStreamGetCaptureInfo");
  if (status != cudaStreamCaptureStatusActive) return;
  l.capture_id.store(id, std::memory_order_relaxed);
  l.captured_by.store(std::this_thread::get_id(), std::memory_order_release);
  l.device->captured_lanes.fetch_add(1, std::memory_order_acq_rel);
}

void forget_capture(CudaLane& origin) {
  const unsigned long long id = origin.capture_id.load(std::memory_order_relaxed);
  CudaDevice& d = *origin.device;
  std::lock_guard<std::mutex> lock(d.lanes_mu);
  for (CudaLane* l : d.lanes) {
    if (!l || l->captured_by.load(std::memory_order_acquire) == std::thread::id{} ||
        l->capture_id.load(std::memory_order_relaxed) != id)
      continue;
    l->captured_by.store(std::thread::id{}, std::memory_order_release);
    d.captured_lanes.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void begin_capture(ComputeContext& ctx) {
  CudaLane& l = lane(ctx);
  check(cudaStreamBeginCapture(l.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    note_capture(l);
  } catch (...) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(l.stream, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
}

std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep) {
  CudaLane& l = lane(ctx);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(l.stream, &graph);
  forget_capture(l);
  if (!keep || ended != cudaSuccess) {
    if (graph) (void)cudaGraphDestroy(graph);
    if (keep) check(ended, "cudaStreamEndCapture");
    (void)cudaGetLastError();
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  check(made, "cudaGraphInstantiate");
  return {exec, [](void* e) { (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e)); }};
}

void replay(ComputeContext& ctx, void* graph) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), stream(ctx)), "cudaGraphLaunch");
}

}  // namespace lockstep::backend::cuda
