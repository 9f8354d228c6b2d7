// Device discovery through the CUDA runtime. No driver or no GPU means zero devices, never
// an error: the CPU backend is always there.
#include <cuda_runtime.h>

#include <string>

namespace lockstep::backend {

int cuda_device_count_impl() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string cuda_device_name_impl(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "CUDA device";
  return std::string(prop.name) + ", " + std::to_string(prop.totalGlobalMem >> 20) + " MiB, sm_" +
         std::to_string(prop.major) + std::to_string(prop.minor);
}

}  // namespace lockstep::backend
