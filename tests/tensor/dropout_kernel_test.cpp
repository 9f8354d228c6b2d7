// Dropout's mask and product in one kernel: the output and gradient bits of the mask-then-multiply
// it replaced, on the CPU (tests/gpu runs the same cases on a GPU).
#include <gtest/gtest.h>

#include "common/dropout_cases.hpp"

namespace lockstep {
namespace {

TEST(DropoutKernel, GivesTheBitsOfTheMaskThenTheProduct) { test::expect_dropout_as_composed(Device{}); }

}  // namespace
}  // namespace lockstep
