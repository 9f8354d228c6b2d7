#pragma once
// What the gpu tests share: the skip without a device, and small helpers.
#include <gtest/gtest.h>

#include <string>

#include "backend/devices.hpp"
#include "backend/kernels.hpp"
#include "lockstep/lockstep.hpp"

namespace lockstep::gpu_test {

inline int gpus() { return backend::device_kind(DeviceKind::kCuda).count(); }

inline std::string why_no_gpu() {
  return backend::backend_available(DeviceKind::kCuda)
             ? "no GPU is visible; the gpu tests run on a GPU machine (scripts/gpu_check.sh)"
             : "this lockstep was built without CUDA";
}

/// Skips the test (GTEST_SKIP) unless `n` GPUs are visible.
#define LOCKSTEP_REQUIRE_GPUS(n)                                                                   \
  do {                                                                                             \
    if (::lockstep::gpu_test::gpus() < (n))                                                        \
      GTEST_SKIP() << "needs " << (n) << " GPU(s), " << ::lockstep::gpu_test::gpus()               \
                   << " visible: " << ::lockstep::gpu_test::why_no_gpu();                          \
  } while (0)
#define LOCKSTEP_REQUIRE_GPU() LOCKSTEP_REQUIRE_GPUS(1)
/// Skips the test unless real GPUs are visible: what only CUDA does (its allocator's memory
/// limits and out-of-memory figures, NCCL), not an emulated GPU (LOCKSTEP_EMULATED_GPUS, which runs
/// the rest of the gpu tests in CI on host memory with the CPU's kernels).
#define LOCKSTEP_REQUIRE_REAL_GPUS(n)                                                              \
  do {                                                                                             \
    LOCKSTEP_REQUIRE_GPUS(n);                                                                      \
    if (::lockstep::backend::device_kind(::lockstep::DeviceKind::kCuda).emulated()) GTEST_SKIP() << "needs real GPUs: these are emulated"; \
  } while (0)
#define LOCKSTEP_REQUIRE_REAL_GPU() LOCKSTEP_REQUIRE_REAL_GPUS(1)

template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// gpu:0 with a compute context of its own, current on this thread while this lives.
struct OnGpu0 {
  Device gpu = Device::parse("gpu:0");
  std::shared_ptr<ComputeContext> ctx = make_compute_context(gpu);
  ComputeScope scope{*ctx};
};

}  // namespace lockstep::gpu_test
