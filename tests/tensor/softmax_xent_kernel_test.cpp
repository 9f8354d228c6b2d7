// A softmax output layer's softmax and its loss in one kernel: the bits of softmax then sparse
// softmax cross-entropy, on the CPU (tests/gpu runs the same cases on a GPU).
#include <gtest/gtest.h>

#include "common/softmax_xent_cases.hpp"

namespace lockstep {
namespace {

TEST(SoftmaxXentKernel, GivesTheBitsOfTheSoftmaxThenTheLoss) { test::expect_softmax_xent_as_composed(Device{}); }

}  // namespace
}  // namespace lockstep
