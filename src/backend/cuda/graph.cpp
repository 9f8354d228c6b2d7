// Capture of the work a CUDA context queues into a CUDA graph, and its replay (jit_compile's
// mechanism). The capture is thread-local: the capturing thread may not call what would wait for
// the device or allocate device memory (cudaMalloc) — a warm-up run first fills the caching
// allocator and the GEMM plans, so that the captured run takes cached blocks only.
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
