// NaN through the activations on every GPU (emulated ones run the CPU's kernels; a real one CUDA's,
// cuBLASLt's epilogue included): a NaN in gives a NaN out, and fit under TerminateOnNaN stops a
// model whose weights became NaN at its first batch. The CPU's are tests/training's
// nan_through_activations_test.cpp; every dtype against a reference, the parity table's rows.
#include "common/nan_activation_cases.hpp"
#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;
using distribute::MirroredStrategy;

TEST(GpuNanActivations, ANanInGivesANanOutOnEveryGpu) {
  LOCKSTEP_REQUIRE_GPU();
  for (int i = 0; i < gpus(); ++i) {
    const Device gpu{DeviceKind::kCuda, i};
    const auto ctx = make_compute_context(gpu);
    ComputeScope scope(*ctx);
    test::expect_activations_keep_nan(gpu.str());
  }
}

TEST(GpuNanActivations, TerminateOnNaNStopsAModelWithNanWeightsAtItsFirstBatch) {
  LOCKSTEP_REQUIRE_GPU();
  for (const auto relu : {test::ReluAt::kActivationLayer, test::ReluAt::kDense}) {
    SCOPED_TRACE(relu == test::ReluAt::kDense ? "Dense's relu" : "an Activation layer's relu");
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    const test::NanFit fit = test::fit_with_nan_weights(relu);
    EXPECT_EQ(fit.stopped_at, 0);
    EXPECT_EQ(fit.steps, 1);
  }
}
