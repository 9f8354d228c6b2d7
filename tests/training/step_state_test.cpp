// The step's numbers as a captured step needs them: what jit_compile's check says about the
// optimizer's learning rate (a schedule the device can evaluate passes; a function of one's own
// is named).
#include <gtest/gtest.h>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/losses/loss.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "lockstep/training/sequential.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using test::inputs;
using test::labels;

std::string reason_after_a_step(optimizers::Schedule schedule) {
  set_random_seed(7);
  Sequential m({layers::Dense(8, "relu", 4), layers::Dense(2, "softmax")}, "mlp");
  m.compile(optimizers::get("adam", std::move(schedule)), losses::SparseCategoricalCrossentropy());
  m.train_step(inputs(8, 4), labels(8, 2));
  return m.jit_compile_reason();
}

TEST(StepState, ALearningRateFunctionIsNamedAsWhatKeepsAStepFromBeingCaptured) {
  const std::string mine = reason_after_a_step([](std::int64_t step) { return 1e-3 / static_cast<double>(step + 1); });
  EXPECT_NE(mine.find("Adam's learning rate comes from a learning-rate schedule given as a function"),
            std::string::npos)
      << mine;
  const std::string keras = reason_after_a_step(optimizers::schedules::CosineDecay(1e-3, 100));
  EXPECT_EQ(keras.find("learning-rate schedule"), std::string::npos) << keras;
  EXPECT_NE(keras.find("the CPU runs each kernel on the host"), std::string::npos) << keras;  // checked all the same
}

}  // namespace
}  // namespace lockstep
