#pragma once
// The CUDA backend where a GPU is: the driver is asked first (libcuda.so.1, without CUDA's
// libraries), and the backend -- the plugin liblockstep_cuda.so with cudart, cuBLASLt and cuDNN
// -- is loaded on the first use of a real GPU. A CPU-only host maps none of it.
#include "backend/cuda/cuda_backend.hpp"

namespace lockstep::backend::cuda_loader {

/// Whether this lockstep was built with the CUDA backend (LOCKSTEP_WITH_CUDA).
bool built();
/// GPUs the NVIDIA driver shows this process (cuInit + cuDeviceGetCount, so CUDA_VISIBLE_DEVICES
/// applies); 0 without CUDA in the build, a driver or a GPU: never an error. Asked once.
int gpu_count();
/// The backend, loaded on first use. Throws ValueError: naming the plugin file when it is
/// missing or broken, or naming the build option when the build has no CUDA.
const cuda::BackendApi& api();
/// The ValueError for `device` (a GPU) when this process sees no GPU at all.
[[noreturn]] void no_gpu(Device device);

}  // namespace lockstep::backend::cuda_loader
