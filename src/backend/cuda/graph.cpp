// Capture of the work a CUDA context queues into a CUDA graph, and its replay (jit_compile's
// mechanism). The capture belongs to the context's stream: whatever thread queues there is
// captured. Other streams of the device join it by waiting for an event recorded in it (the
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

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_device.hpp"

namespace lockstep::backend::cuda {

std::string capture_refusal() { return {}; }

void begin_capture(ComputeContext& ctx) {
  check(cudaStreamBeginCapture(stream(ctx), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

std::shared_ptr<void> end_capture(ComputeContext& ctx, bool keep) {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(ctx), &graph);
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
