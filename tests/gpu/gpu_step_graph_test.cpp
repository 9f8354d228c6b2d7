// StepGraph, jit_compile's mechanism, on a GPU: ops captured once on a context's stream (a
// GEMM and elementwise kernels) replay on what their static inputs hold at each replay and give
// the bits the same ops give eagerly; an op that waits for the device inside the capture fails by
// name and leaves the stream usable. Emulated GPUs record the CPU's kernels the same way (CI).
#include <memory>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "backend/capture.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
bool emulated() { return backend::device_kind(DeviceKind::kCuda).emulated(); }
Tensor work(const Tensor& a, const Tensor& b) { return relu(add(matmul(a, b), a)); }
}  // namespace

TEST(GpuStepGraph, ReplaysTheCapturedOpsOnWhatTheirInputsHoldNow) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  Tensor a = test::random_uniform({64, 64}, 1).to(gpu), b = test::random_uniform({64, 64}, 2).to(gpu);
  (void)work(a, b).to_vector<float>();  // warm-up: the cache holds the blocks, the GEMM its plan
  Tensor mm, sum, out;                  // the captured work's outputs, kept with the graph
  StepGraph graph(*on.ctx, [&] {
    mm = matmul(a, b);
    sum = add(mm, a);
    out = relu(sum);
  });
  for (std::uint64_t seed : {3, 4, 5}) {
    const Tensor next = test::random_uniform({64, 64}, seed);
    a.copy_from(next.to(gpu));  // the static input, refilled in place
    graph.replay();
    const std::vector<float> got = out.to_vector<float>(), want = work(a, b).to_vector<float>();
    EXPECT_EQ(got, want) << "seed " << seed;
  }
}

TEST(GpuStepGraph, AnOpThatWaitsForTheDeviceFailsInsideTheCaptureAndTheStreamStaysUsable) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const Tensor a = test::random_uniform({8}, 1).to(gpu);
  (void)add(a, a).to_vector<float>();
  const std::string msg = message_of([&] { StepGraph graph(*on.ctx, [&] { (void)add(a, a).to_vector<float>(); }); });
  if (emulated())
    EXPECT_TRUE(has(msg, "a copy of 32 bytes from the device to the host inside a graph capture on gpu:0")) << msg;
  else
    EXPECT_TRUE(has(msg, "CUDA error")) << msg;
  EXPECT_EQ(add(a, a).to_vector<float>().size(), 8u);  // eager work runs again
}

// What the captured work allocated is the graph's until the graph is gone: a tensor made after
// the capture never gets memory a replay writes.
TEST(GpuStepGraph, MemoryTheCaptureTookIsNotHandedOutWhileTheGraphLives) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  const Device& gpu = on.gpu;
  const Tensor a = test::random_uniform({16}, 1).to(gpu);
  (void)relu(add(a, a)).to_vector<float>();  // warm-up
  Tensor out;
  const void* intermediate = nullptr;
  auto graph = std::make_unique<StepGraph>(*on.ctx, [&] {
    const Tensor sum = add(a, a);  // freed inside the capture: the pool's, not the cache's
    intermediate = sum.raw_data();
    out = relu(sum);
  });
  graph->replay();
  const Tensor later = add(a, a);
  EXPECT_NE(later.raw_data(), intermediate);
  EXPECT_EQ(out.to_vector<float>(), relu(later).to_vector<float>());
}

// The emulated kind records each kernel with copies of its arguments; a kernel handed host
// arrays of pointers (combine's) cannot be kept and is refused by name, as the check says.
TEST(GpuStepGraph, EmulatedGpusRefuseAKernelTheirRecordingCannotKeepByName) {
  LOCKSTEP_REQUIRE_GPU();
  if (!emulated()) GTEST_SKIP() << "real GPUs capture combine";
  const OnGpu0 on;
  EXPECT_EQ(step_capture_refusal(on.gpu), "");
  const char* why = backend::kernel_capture_refusal(DeviceKind::kCuda, backend::KernelOp::kCombine);
  ASSERT_NE(why, nullptr);
  EXPECT_TRUE(has(why, "host arrays of pointers")) << why;
  float x[4] = {1, 2, 3, 4};
  const void* in[1] = {x};
  void* out[1] = {x};
  const std::string msg = message_of([&] {
    StepGraph graph(*on.ctx, [&] {
      backend::kernels(DeviceKind::kCuda, DType::kF32).combine(*on.ctx, ReduceOp::kSum, in, 1, out, 1, 0, 4);
    });
  });
  EXPECT_TRUE(has(msg, "the kernel combine, which takes host arrays of pointers")) << msg;
  EXPECT_TRUE(has(msg, "inside a graph capture on gpu:0")) << msg;
}
