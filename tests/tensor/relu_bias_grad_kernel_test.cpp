// A Dense layer's ReLU backward and bias gradient in one op: the bits of unary_grad then sum, on
// the CPU (tests/gpu runs the same cases on a GPU).
#include <gtest/gtest.h>

#include "common/relu_bias_grad_cases.hpp"

namespace lockstep {
namespace {

TEST(ReluBiasGradKernel, GivesTheBitsOfTheReluGradientThenTheSum) { test::expect_relu_bias_grad_as_composed(Device{}); }

}  // namespace
}  // namespace lockstep
