// NaN through the activations on the CPU (the kernels emulated GPUs run too; gpu_tests runs the
// same cases on every GPU): a NaN in gives a NaN out, and a model whose weights became NaN is
// stopped by TerminateOnNaN at its first batch. The kernel-level rows (every dtype, against a
// reference) are the backend parity table's "nonfinite" and "nan" rows.
#include <gtest/gtest.h>

#include "common/nan_activation_cases.hpp"

namespace lockstep {
namespace {

TEST(NanThroughActivations, ANanInGivesANanOutOnTheCpu) { test::expect_activations_keep_nan("cpu"); }

// Before, relu(NaN) was 0 in the Activation layer's kernel: the loss was the last layer's bias's,
// finite, and fit ran all 16 steps with NaN weights.
TEST(NanThroughActivations, TerminateOnNaNStopsAModelWithNanWeightsAtItsFirstBatch) {
  for (const auto relu : {test::ReluAt::kActivationLayer, test::ReluAt::kDense}) {
    SCOPED_TRACE(relu == test::ReluAt::kDense ? "Dense's relu" : "an Activation layer's relu");
    const test::NanFit fit = test::fit_with_nan_weights(relu);
    EXPECT_EQ(fit.stopped_at, 0);
    EXPECT_EQ(fit.steps, 1);
  }
}

}  // namespace
}  // namespace lockstep
