#pragma once
// What the gpu tests share: the skip without a device, and small helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

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

/// Each weight trained on a GPU within 1e-4 + 1e-4 |w| of the same weight trained on the CPU (the
/// model tests' tolerance: float32 kernels summing in other orders over a few epochs). Fatal at the
/// first mismatch: call it inside ASSERT_NO_FATAL_FAILURE.
inline void assert_weights_near_cpu(const std::vector<std::vector<float>>& gpu,
                                    const std::vector<std::vector<float>>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(gpu[i].size(), cpu[i].size()) << "variable " << i;
    for (std::size_t j = 0; j < cpu[i].size(); ++j)
      ASSERT_NEAR(gpu[i][j], cpu[i][j], 1e-4f + 1e-4f * std::abs(cpu[i][j])) << "variable " << i << " at " << j;
  }
}

/// What a GPU model test compares after fit: the weights, each epoch's loss, and why a step ran
/// eagerly ("" where it was captured).
struct FitRun {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
  std::string jit_reason;
};

/// The model tests' fit: `m` (compiled, its jit_compile set) for 2 epochs of 8 unshuffled, its
/// progress lines swallowed (restored before an exception leaves); what FitRun holds.
inline FitRun fit_quietly(Model& m, const Tensor& x, const Tensor& y) {
  ::testing::internal::CaptureStderr();
  History h;
  try {
    h = m.fit(x, y, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  } catch (...) {
    (void)::testing::internal::GetCapturedStderr();
    throw;
  }
  (void)::testing::internal::GetCapturedStderr();
  FitRun t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  t.jit_reason = m.jit_compile_reason();
  return t;
}

/// train(mode, devices) with jit_compile on and off on `devices`: the step was captured and both
/// give the same bits. Returns the eager run.
template <typename Train>
FitRun expect_capture_changes_nothing(Train&& train, const std::string& devices) {
  const FitRun captured = train(JitCompile::kOn, devices);
  const FitRun eager = train(JitCompile::kOff, devices);
  EXPECT_EQ(captured.jit_reason, "");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
  return eager;
}

/// A GPU run near the CPU's: assert_weights_near_cpu, and each epoch's loss within 1e-5 of it
/// (relative). Call it inside ASSERT_NO_FATAL_FAILURE.
inline void assert_near_cpu(const FitRun& gpu, const FitRun& cpu) {
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(gpu.weights, cpu.weights));
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (std::size_t e = 0; e < cpu.losses.size(); ++e)
    EXPECT_NEAR(gpu.losses[e], cpu.losses[e], 1e-5 * cpu.losses[e]) << "epoch " << e;
}

}  // namespace lockstep::gpu_test
