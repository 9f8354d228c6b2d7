// A Dense layer's forward in one op (gemm_bias_activation): the bits of matmul, the bias's add and
// relu, on the CPU (tests/gpu runs the same cases on a GPU).
#include <gtest/gtest.h>

#include "common/dense_epilogue_cases.hpp"

namespace lockstep {
namespace {

TEST(DenseEpilogueKernel, GivesTheBitsOfTheProductThenTheBiasThenTheRelu) {
  test::expect_dense_epilogue_as_composed(Device{});
}

}  // namespace
}  // namespace lockstep
