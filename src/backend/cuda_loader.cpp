#include "backend/cuda_loader.hpp"

#include <dlfcn.h>

#include "backend/plugin.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::cuda_loader {

bool built() {
#ifdef LOCKSTEP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int gpu_count() {
  static const int count = [] {
    if (!built()) return 0;
    // The driver API's two calls, by hand: CUresult is an int, 0 is CUDA_SUCCESS. The driver
    // library stays loaded (the backend would load it again).
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr) {
      (void)dlerror();
      return 0;
    }
    using Init = int (*)(unsigned);
    using GetCount = int (*)(int*);
    const auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
    const auto get_count = reinterpret_cast<GetCount>(dlsym(driver, "cuDeviceGetCount"));
    int n = 0;
    if (init == nullptr || get_count == nullptr || init(0) != 0 || get_count(&n) != 0) return 0;
    return n;
  }();
  return count;
}

const cuda::BackendApi& api() {
  static const cuda::BackendApi* const loaded = []() -> const cuda::BackendApi* {
    if (!built()) return nullptr;
    using Entry = const cuda::BackendApi* (*)();
    const auto entry = reinterpret_cast<Entry>(plugin_symbol(cuda::kPluginFile, cuda::kPluginEntry));
    const cuda::BackendApi* a = entry();
    if (a == nullptr || a->abi != cuda::BackendApi::kAbi || a->size != sizeof(cuda::BackendApi))
      throw ValueError(std::string("lockstep's plugin ") + cuda::kPluginFile +
                       " comes from another lockstep build (its interface differs); reinstall lockstep");
    return a;
  }();
  if (loaded == nullptr)
    throw ValueError("GPUs: this lockstep was built without CUDA (LOCKSTEP_WITH_CUDA=OFF); use cpu devices");
  return *loaded;
}

void no_gpu(Device device) {
  throw ValueError("device '" + device.str() +
                   "' does not exist: this machine has 0 GPU(s) visible to CUDA (no NVIDIA driver or GPU, or "
                   "CUDA_VISIBLE_DEVICES hides them); use cpu devices or another GPU");
}

}  // namespace lockstep::backend::cuda_loader
