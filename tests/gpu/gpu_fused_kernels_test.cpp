// Kernels fused to cut a captured step's launches give the bits of the kernels they replace on a
// GPU: the train step's loss gradient seeded in one kernel (loss_seed) against the summed loss
// differentiated (the way before, aaf2dcb), captured (jit_compile's default) and with a loss scale,
// for a model of one output and each output of two;
// accuracy's batch state in one kernel (accuracy_state) against argmax, compare, cast and sum;
// dropout's mask and product in one kernel against the mask then binary's multiply; a softmax
// output's softmax and its sparse cross-entropy in one kernel against the two; a Dense layer's
// ReLU backward and bias gradient in one op against unary_grad then sum; a Dense layer's product,
// bias and ReLU in one op (cuBLASLt's epilogue) against matmul, add and relu.
#include <string>
#include <vector>

#include "common/accuracy_cases.hpp"
#include "common/dense_epilogue_cases.hpp"
#include "common/dropout_cases.hpp"
#include "common/relu_bias_grad_cases.hpp"
#include "common/softmax_xent_cases.hpp"
#include "common/summed_loss_steps.hpp"
#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::gpu_test;

TEST(GpuFusedKernels, TrainStepWeightsAreThoseOfTheSummedLossDifferentiated) {
  LOCKSTEP_REQUIRE_GPU();
  for (const bool loss_scaled : {false, true}) {
    EXPECT_EQ(test::weights_after_steps("gpu:0", loss_scaled, false, 5),
              test::weights_after_steps("gpu:0", loss_scaled, true, 5))
        << (loss_scaled ? "under a loss scale" : "no loss scale");
  }
}

// A model of two outputs, each output's losses seeded with its weight, on the GPU (captured after
// fit's first step): the weights of the outputs' sums weighted, added and scaled, differentiated.
TEST(GpuFusedKernels, TwoOutputsTrainStepWeightsAreThoseOfTheirWeightedSumDifferentiated) {
  LOCKSTEP_REQUIRE_GPU();
  for (const bool loss_scaled : {false, true}) {
    EXPECT_EQ(test::two_output_weights_after_steps("gpu:0", loss_scaled, false, 0.3f, 4),
              test::two_output_weights_after_steps("gpu:0", loss_scaled, true, 0.3f, 4))
        << (loss_scaled ? "under a loss scale" : "no loss scale");
  }
}

// Accuracy's batch state in one kernel, on the GPU: the numbers of the ops it replaced.
TEST(GpuFusedKernels, AccuracyStateGivesTheNumbersOfArgmaxCompareCastAndSum) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  test::expect_accuracy_as_composed(on.gpu);
}

TEST(GpuFusedKernels, KerasAccuracyIsExactEqualityValueByValue) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  test::expect_keras_accuracy(on.gpu);
}

// Dropout's mask and product in one kernel, on the GPU: the bits of the mask then the product.
TEST(GpuFusedKernels, DropoutGivesTheBitsOfTheMaskThenTheProduct) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  test::expect_dropout_as_composed(on.gpu);
}

// A softmax output's softmax and its loss in one kernel, on the GPU: the bits of the two kernels.
TEST(GpuFusedKernels, SoftmaxXentGivesTheBitsOfTheSoftmaxThenTheLoss) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  test::expect_softmax_xent_as_composed(on.gpu);
}

// A Dense layer's ReLU backward and bias gradient in one op, on the GPU (its column sums in
// reduce_sum's segments and order): the bits of the two ops.
TEST(GpuFusedKernels, ReluBiasGradGivesTheBitsOfTheReluGradientThenTheSum) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  test::expect_relu_bias_grad_as_composed(on.gpu);
}

// A Dense layer's product, bias and ReLU in one op, on the GPU: on emulated GPUs the bits of the
// three ops; on CUDA (the bias and ReLU in cuBLASLt's epilogue, 16-bit outputs rounded once where
// the ops round twice) within rounding of them.
TEST(GpuFusedKernels, DenseEpilogueGivesTheProductThenTheBiasThenTheRelu) {
  LOCKSTEP_REQUIRE_GPU();
  const OnGpu0 on;
  test::expect_dense_epilogue_as_composed(on.gpu, backend::device_kind(DeviceKind::kCuda).emulated());
}
