// jit_compile's check as the tensor layer keeps it: a check watches only the threads that open
// it, names each op a replay could not repeat once (its kernel and why), and a capture on a
// device that cannot capture is refused by name.
#include <gtest/gtest.h>

#include <thread>

#include "common/error_message.hpp"
#include "lockstep/tensor/attention.hpp"
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

// Dropout keyed by a host step (a custom loop's) is named; keyed by a step block's count (fit's
// train step) or not dropping (rate 0: attention without dropout), nothing is.
TEST(StepCaptureCheck, DropoutIsNamedOnlyWhereItDropsWithAHostStep) {
  const Tensor x = Tensor::ones({4, 6});
  const Tensor q = Tensor::ones({1, 2, 3, 4});
  Tensor block = step_block();
  set_step_count_(block, 3);
  StepCaptureCheck on_device, on_host;
  {
    const StepCaptureCheck::OnThisThread watched(&on_device);
    (void)dropout(x, 0.5f, {.seed = 1, .step_block = block});
    (void)dropout(x, 0.0f, {.seed = 1});
    (void)scaled_dot_product_attention(q, q, q);
    (void)scaled_dot_product_attention(q, q, q, {}, {.dropout_rate = 0.5f, .dropout_key = {.step_block = block}});
  }
  EXPECT_EQ(on_device.blocker(), "");
  {
    const StepCaptureCheck::OnThisThread watched(&on_host);
    (void)dropout(x, 0.5f, {.seed = 1, .step = 3});
    (void)scaled_dot_product_attention(q, q, q, {}, {.dropout_rate = 0.5f, .dropout_key = {.step = 3}});
  }
  EXPECT_EQ(on_host.blocker(),
            "the op 'dropout' (kernel dropout) takes the step that keys dropout as a host value, which a "
            "replay would freeze; the op 'scaled_dot_product_attention' (kernel attention) takes the step that "
            "keys dropout as a host value, which a replay would freeze");
}

TEST(StepCaptureCheck, DropoutKeyedByABlockDropsAsKeyedByItsCountAndABadBlockIsNamed) {
  const Tensor x = Tensor::ones({16, 32});
  Tensor block = step_block();
  set_step_count_(block, 5);
  const auto mask = [&](const DropoutKey& k) { return dropout(x, 0.5f, k).to_vector<float>(); };
  EXPECT_EQ(mask({.seed = 2, .stream = 1, .step_block = block}), mask({.seed = 2, .stream = 1, .step = 5}));
  EXPECT_NE(mask({.seed = 2, .stream = 1, .step_block = block}), mask({.seed = 2, .stream = 1, .step = 4}));
  EXPECT_VALUE_ERROR(dropout(x, 0.5f, {.step_block = Tensor::zeros({3})}),
                     "dropout: the step block must be a float32 tensor of");
}

TEST(StepGraph, TheCpuRefusesACaptureByName) {
  const Device cpu = context_device(current_compute_context());
  EXPECT_NE(step_capture_refusal(cpu), "");
  bool ran = false;
  EXPECT_VALUE_ERROR(StepGraph(current_compute_context(), [&] { ran = true; }),
                     "work on cpu:0 cannot be captured into a graph: the CPU runs each kernel on the host");
  EXPECT_FALSE(ran);
}

// transpose's permutation is its kernel's parameters: nothing is copied from the host, so a step
// that permutes axes (Permute, Softmax over another axis) can be replayed.
TEST(StepCaptureCheck, TransposeCopiesNothingFromTheHost) {
  const Tensor x = Tensor::zeros({2, 3, 4});
  StepCaptureCheck check;
  {
    const StepCaptureCheck::OnThisThread watched(&check);
    EXPECT_EQ(transpose(x, {2, 0, 1}).shape(), Shape({4, 2, 3}));
  }
  EXPECT_EQ(check.blocker(), "");
}

}  // namespace
}  // namespace lockstep
