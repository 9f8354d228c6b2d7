// The plugin's entry point: what src/backend/cuda_loader.cpp finds with dlsym.
#include "backend/cuda/cuda_backend.hpp"

extern "C" __attribute__((visibility("default"))) const lockstep::backend::cuda::BackendApi* lockstep_cuda_backend() {
  namespace cuda = lockstep::backend::cuda;
  static const cuda::BackendApi api{.device_count = cuda::device_count,
                                    .device_name = cuda::device_name,
                                    .table = cuda::table,
                                    .device_ops = cuda::device_ops,
                                    .make_context = cuda::make_context,
                                    .runtime_summary = cuda::runtime_summary,
                                    .utilization_percent = cuda::utilization_percent,
                                    .stream_of = cuda::stream_of,
                                    .capture_refusal = cuda::capture_refusal,
                                    .begin_capture = cuda::begin_capture,
                                    .end_capture = cuda::end_capture,
                                    .replay = cuda::replay,
                                    .staged_copy_ops = cuda::staged_copy_ops,
                                    .wait_for_queue = cuda::wait_for_queue};
  return &api;
}
