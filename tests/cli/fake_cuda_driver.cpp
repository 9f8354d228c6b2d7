// A stand-in for the NVIDIA driver (built as libcuda.so.1, put first on LD_LIBRARY_PATH by
// tests/cli/cuda_plugin_load.sh): it says one GPU is there, so that a host without one loads the
// CUDA plugin as a GPU host would. CUDA's runtime finds none of its other entry points and
// answers every question with an error, which lockstep reports as it would a driver's.
extern "C" {
int cuInit(unsigned /*flags*/) { return 0; }
int cuDeviceGetCount(int* count) {
  *count = 1;
  return 0;
}
}
