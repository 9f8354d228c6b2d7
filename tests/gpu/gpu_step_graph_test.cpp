// StepGraph, jit_compile's mechanism, on a real GPU: ops captured once on a context's stream
// (a cuBLASLt GEMM and elementwise kernels) replay on what their static inputs hold at each
// replay and give the bits the same ops give eagerly; an op that waits for the device inside the
// capture fails by name and leaves the stream usable. Elsewhere a capture is refused by name.
#include <memory>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

namespace {
Tensor work(const Tensor& a, const Tensor& b) { return relu(add(matmul(a, b), a)); }
}  // namespace

TEST(GpuStepGraph, ReplaysTheCapturedOpsOnWhatTheirInputsHoldNow) {
  LOCKSTEP_REQUIRE_REAL_GPU();
  const Device gpu = Device::parse("gpu:0");
  auto ctx = make_compute_context(gpu);
  const ComputeScope scope(*ctx);
  Tensor a = test::random_uniform({64, 64}, 1).to(gpu), b = test::random_uniform({64, 64}, 2).to(gpu);
  (void)work(a, b).to_vector<float>();  // warm-up: the cache holds the blocks, the GEMM its plan
  Tensor mm, sum, out;                  // the captured work's outputs, kept with the graph
  StepGraph graph(*ctx, [&] {
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
  LOCKSTEP_REQUIRE_REAL_GPU();
  const Device gpu = Device::parse("gpu:0");
  auto ctx = make_compute_context(gpu);
  const ComputeScope scope(*ctx);
  const Tensor a = test::random_uniform({8}, 1).to(gpu);
  (void)add(a, a).to_vector<float>();
  const std::string msg = message_of([&] { StepGraph graph(*ctx, [&] { (void)add(a, a).to_vector<float>(); }); });
  EXPECT_TRUE(has(msg, "CUDA error")) << msg;
  EXPECT_EQ(add(a, a).to_vector<float>().size(), 8u);  // eager work runs again
}

TEST(GpuStepGraph, EmulatedGpusRefuseACaptureByName) {
  LOCKSTEP_REQUIRE_GPU();
  if (!backend::device_kind(DeviceKind::kCuda).emulated()) GTEST_SKIP() << "real GPUs capture";
  auto ctx = make_compute_context(Device::parse("gpu:0"));
  const std::string msg = message_of([&] { StepGraph graph(*ctx, [] {}); });
  EXPECT_TRUE(has(msg, "work on gpu:0 cannot be captured into a graph: emulated GPUs")) << msg;
}
