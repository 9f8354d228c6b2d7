// jit_compile's check as the tensor layer keeps it: a check watches only the threads that open
// it, names each op a replay could not repeat once (its kernel and why), and a capture on a
// device that cannot capture is refused by name.
#include <gtest/gtest.h>

#include <thread>

#include "common/error_message.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/step_capture.hpp"

namespace lockstep {
namespace {

TEST(StepCaptureCheck, NamesEachOpThatCannotBeReplayedOnceAndOnlyOnWatchedThreads) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3});
  StepCaptureCheck check;
  {
    const StepCaptureCheck::OnThisThread watched(&check);
    EXPECT_EQ(current_step_capture_check(), &check);
    (void)add(x, x);  // a replay repeats it
    EXPECT_EQ(check.blocker(), "");
    (void)sum_squares(x);
    (void)sum_squares(x);  // named once
    std::thread([&] { (void)x.to_vector<float>(); }).join();  // another thread: not watched
    {
      const StepCaptureCheck::OnThisThread nothing(nullptr);
      (void)x.to_vector<float>();  // not watched either
    }
    EXPECT_EQ(current_step_capture_check(), &check);
  }
  EXPECT_EQ(current_step_capture_check(), nullptr);
  (void)x.to_vector<float>();
  EXPECT_EQ(check.blocker(), "the op 'sum_squares' (kernel sum_squares) returns its result to the host");
  {
    const StepCaptureCheck::OnThisThread watched(&check);
    (void)x.to_vector<float>();
  }
  EXPECT_EQ(check.blocker(),
            "the op 'sum_squares' (kernel sum_squares) returns its result to the host; a read of a (3,) tensor's "
            "values on the host (the host waits for the device there)");
}

TEST(StepGraph, TheCpuRefusesACaptureByName) {
  const Device cpu = context_device(current_compute_context());
  EXPECT_NE(step_capture_refusal(cpu), "");
  bool ran = false;
  EXPECT_VALUE_ERROR(StepGraph(current_compute_context(), [&] { ran = true; }),
                     "work on cpu:0 cannot be captured into a graph: the CPU runs each kernel on the host");
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace lockstep
