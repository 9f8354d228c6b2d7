// The step's numbers as a captured step needs them: what jit_compile's check says about the
// optimizer's learning rate (a schedule the device can evaluate passes; a function of one's own
// is named), and the count each replica's step block holds following the host's (set_iterations)
// and Keras' rule that a skipped step does not count.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/layers/core_layers.hpp"
#include "lockstep/losses/loss.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/tensor/ops_loss_scale.hpp"
#include "lockstep/training/callbacks.hpp"
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

TEST(StepState, ACountSetByTheHostInsideACheckedStepIsNamedButTheFirstStepsIsNot) {
  set_random_seed(7);
  Sequential m({layers::Dense(8, "relu", 4), layers::Dense(2, "softmax")}, "mlp");
  m.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy());
  m.optimizer()->set_iterations(3);  // a restored count: written as the blocks are made
  m.train_step(inputs(8, 4), labels(8, 2));
  EXPECT_EQ(m.jit_compile_reason().find("step count"), std::string::npos) << m.jit_compile_reason();
  // Set between steps, the next (checked) step writes it from the host: a replay would repeat that.
  m.optimizer()->set_iterations(10);
  m.set_jit_compile(JitCompile::kAuto);  // checks the next step again
  m.train_step(inputs(8, 4), labels(8, 2));
  EXPECT_NE(m.jit_compile_reason().find("Adam's step count set by the host within the step (to 10)"),
            std::string::npos)
      << m.jit_compile_reason();
  EXPECT_EQ(m.optimizer()->iterations(), 11);
}

TEST(StepState, NeitherClipnormNorTheLossScalesFiniteCheckIsAHostRead) {
  const auto reason = [](optimizers::OptimizerPtr opt) {
    set_random_seed(7);
    Sequential m({layers::Dense(8, "relu", 4), layers::Dense(2, "softmax")}, "mlp");
    m.compile(std::move(opt), losses::SparseCategoricalCrossentropy());
    m.train_step(inputs(8, 4), labels(8, 2));
    return m.jit_compile_reason();
  };
  // The norms are summed and applied by kernels on the device: nothing for a replay to miss.
  optimizers::SGDOptions clip;
  clip.clipnorm = 1.0;
  clip.clipvalue = 0.5;
  const std::string clipped = reason(optimizers::SGD(clip));
  EXPECT_EQ(clipped.find("clip"), std::string::npos) << clipped;
  EXPECT_EQ(clipped.find("sum_squares"), std::string::npos) << clipped;
  optimizers::AdamOptions global;
  global.global_clipnorm = 1.0;
  const std::string global_clipped = reason(optimizers::Adam(global));
  EXPECT_EQ(global_clipped.find("clip"), std::string::npos) << global_clipped;
  EXPECT_EQ(global_clipped.find("sum_squares"), std::string::npos) << global_clipped;
  // The scale, its check and its move live in the step block; an eager step's read of the mark
  // is not one a replay makes.
  const std::string scaled = reason(optimizers::LossScale(optimizers::Adam(1e-3)));
  EXPECT_EQ(scaled.find("finite check"), std::string::npos) << scaled;
  EXPECT_EQ(scaled.find("values on the host"), std::string::npos) << scaled;
  EXPECT_EQ(scaled.find("loss_scale"), std::string::npos) << scaled;
}

TEST(StepState, TheDeviceCountFollowsSetIterations) {
  // lr 1 up to step 50, then 0: a step at a count past 50 leaves the weights alone.
  auto opt = optimizers::get("sgd", optimizers::schedules::PiecewiseConstantDecay({50}, {1.0, 0.0}));
  Variable w(Tensor::from_vector(std::vector<float>{0.0f}, Shape{1}), "w");
  const Tensor g = Tensor::from_vector(std::vector<float>{1.0f}, Shape{1});
  opt->apply_gradients({{g, w}});
  opt->apply_gradients({{g, w}});
  EXPECT_EQ(w.value().to_vector<float>()[0], -2.0f);
  opt->set_iterations(100);
  opt->apply_gradients({{g, w}});
  EXPECT_EQ(w.value().to_vector<float>()[0], -2.0f) << "the step ran at the block's old count";
  EXPECT_EQ(opt->iterations(), 101);
  opt->set_iterations(7);
  opt->apply_gradients({{g, w}});
  EXPECT_EQ(w.value().to_vector<float>()[0], -3.0f);
}

TEST(StepState, ASkippedStepDoesNotCountForTheNextStepsBiasCorrection) {
  // Keras 3: a step the loss scale skips leaves iterations alone, so the next finite step is
  // Adam's first (t = 1), bit for bit a plain Adam's first step on the unscaled gradient.
  optimizers::LossScaleOptimizer lso(optimizers::Adam(0.01), {.initial_scale = 4.0});
  auto plain = optimizers::Adam(0.01);
  Variable a(Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, Shape{2}), "a");
  Variable b(Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, Shape{2}), "b");
  lso.apply_gradients({{Tensor::from_vector(std::vector<float>{INFINITY, 1.0f}, Shape{2}), a}});
  EXPECT_EQ(lso.iterations(), 0);
  EXPECT_EQ(a.value().to_vector<float>(), (std::vector<float>{0.5f, -1.0f}));
  for (int step = 0; step < 3; ++step) {
    lso.apply_gradients({{Tensor::from_vector(std::vector<float>{0.8f, -2.0f}, Shape{2}), a}});
    plain->apply_gradients({{Tensor::from_vector(std::vector<float>{0.2f, -0.5f}, Shape{2}), b}});  // / 4
    EXPECT_EQ(a.value().to_vector<float>(), b.value().to_vector<float>()) << "after step " << step;
  }
  EXPECT_EQ(lso.iterations(), 3);
}

TEST(StepState, TheFiniteCheckMarksTheBlockAndTheUpdatesLeaveASkippedStepAlone) {
  // The loss scale's check on the device (unscale_check, by a scale of 1): a non-finite element
  // of any gradient (float32 or float16) marks the block, the updates then leave w and the slots
  // as they were and the next step_begin_ does not count the step, and clears the mark.
  step_state::StepRule rule;
  rule.schedule.initial = 1.0;
  rule.kind = step_state::RuleKind::kAdam;
  rule.beta_1 = 0.9;
  rule.beta_2 = 0.999;
  Tensor block = step_block();
  set_loss_scale_(block, {.scale = 1, .counter = 0, .skipped = 0});
  set_step_rule_(block, rule);
  step_begin_(block);
  const Tensor finite = Tensor::from_vector(std::vector<float>{1.0f, -2.0f}, Shape{2});
  (void)unscale_check(finite, block);
  (void)unscale_check(Tensor::from_vector(std::vector<float>{65504.0f}, Shape{1}).to(DType::kF16), block);
  EXPECT_FALSE(step_skipped(block));
  Tensor w = Tensor::from_vector(std::vector<float>{0.5f, 0.5f}, Shape{2});
  Tensor m = Tensor::zeros({2}), v = Tensor::zeros({2}), none;
  const AdamBetas betas{.one_minus_beta_1 = 0.1f, .one_minus_beta_2 = 0.001f, .epsilon = 1e-7f};
  (void)unscale_check(Tensor::from_vector(std::vector<float>{0.0f, NAN}, Shape{2}), block);
  (void)unscale_check(finite, block);  // a finite gradient after it does not clear the mark
  EXPECT_TRUE(step_skipped(block));
  adam_update_(w, m, v, finite, block, betas);
  sgd_update_(w, none, finite, block, 0.0f, false);
  sgd_update_(w, none, {finite, finite}, {}, block, 0.0f, false);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.5f, 0.5f})) << "skipped: w untouched";
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(v.to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(step_count(block), 0) << "a skipped step does not count";
  step_begin_(block);
  EXPECT_FALSE(step_skipped(block)) << "the next step applies unless its own check fails";
  (void)unscale_check(Tensor::from_vector(std::vector<float>{INFINITY}, Shape{1}).to(DType::kF16), block);
  EXPECT_TRUE(step_skipped(block)) << "a float16 infinity";
  step_begin_(block);
  sgd_update_(w, none, finite, block, 0.0f, false);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{-0.5f, 2.5f})) << "applied: w -= lr g";
  EXPECT_EQ(step_count(block), 1);
  // The applied step ends at the next start, which derives the numbers of count 1 (Adam's t = 2).
  step_begin_(block);
  step_state::StepBlock held;
  block.copy_to_host(&held, sizeof held);
  EXPECT_EQ(held.state.iterations, 1);
  // Near: powf here need not give the bits of the kernel's (built apart, as the parity row allows).
  EXPECT_NEAR(held.scalars.alpha, step_state::derive_step_scalars(rule, 1).alpha, 8e-6f);
  EXPECT_GT(std::abs(held.scalars.alpha - step_state::derive_step_scalars(rule, 0).alpha), 1e-3f);
}

// The loss scale kept in the step block: the loss factor, the gradients unscaled and checked in
// one pass, and the scale moved give the bits and states of the host's LossScaleOptimizer path
// (scale(loss, factor), scale(g, 1/scale) checked on the host, update_scale), float32 and float16.
TEST(StepState, TheLossScaleInTheBlockGivesTheBitsOfTheHostPath) {
  optimizers::LossScaleOptimizer host(optimizers::SGD(0.1), {.initial_scale = 3, .dynamic_growth_steps = 2});
  Tensor block = step_block();
  set_loss_scale_(block, {.scale = host.loss_scale(), .counter = 0, .skipped = 0});
  const Tensor g32 = Tensor::from_vector(std::vector<float>{1.0f, -2.5f, 1e-3f, 7.77f, 65000.0f}, Shape{5});
  const bool finite_steps[] = {true, false, true, true, true, false};
  for (const bool finite : finite_steps) {
    EXPECT_EQ(loss_seed(Tensor(), block, 1.0 / 7.0, 0.0f).to_vector<float>(),
              std::vector<float>{loss_scale_math::loss_factor(1.0 / 7.0, host.loss_scale())});
    const float inverse = loss_scale_math::unscale_factor(host.loss_scale());
    bool all_finite = true;  // the host path's own check
    for (const Tensor& g : {g32, g32.to(DType::kF16)}) {
      const Tensor x = finite ? g : mul(g, Tensor::scalar(INFINITY, g.dtype()));
      const Tensor want = scale(x, inverse);
      for (const float v : want.to(DType::kF32).to_vector<float>()) all_finite = all_finite && std::isfinite(v);
      EXPECT_TRUE(unscale_check(x, block).bitwise_equal(want)) << dtype_name(g.dtype());
    }
    EXPECT_EQ(step_skipped(block), !finite);
    EXPECT_EQ(all_finite, finite);
    update_loss_scale_(block, 2);
    host.update_scale(finite);
    const loss_scale_math::LossScaleState st = loss_scale_state(block);
    EXPECT_EQ(st.scale, host.loss_scale());
    EXPECT_EQ(st.counter, host.step_counter());
    EXPECT_EQ(st.skipped, host.skipped_steps());
    step_begin_(block);  // the next step applies unless its check fails
  }
  EXPECT_EQ(host.skipped_steps(), 2);
}

// The optimizer's rule lives in the step block, written by the host before the step that needs it:
// once for a rate or a schedule the device evaluates (set_iterations moves only the count), again
// after set_learning_rate, and every step for a function of one's own (its rate of that step). SGD
// on a gradient of ones moves w by exactly each step's rate (powers of two), so the rate each
// step's block held is read off w.
TEST(StepState, TheBlockTakesTheRuleTheHostSetBeforeTheStepThatUsesIt) {
  const Tensor ones = Tensor::from_vector(std::vector<float>{1.0f}, Shape{1});
  const auto rule_sets = [] { return detail::kernel_launches(Device{}, "step_rule_set"); };
  const auto step = [&](optimizers::Optimizer& opt, Variable& w) {
    const float before = w.read_value().to_vector<float>()[0];
    opt.apply_gradients({{ones, w}});
    return before - w.read_value().to_vector<float>()[0];  // the step's rate
  };
  {
    Variable w(Tensor::zeros({1}), "w");
    optimizers::SGDOptions o;
    o.schedule = [](std::int64_t s) { return std::ldexp(1.0, -1 - static_cast<int>(s)); };  // 1/2, 1/4, ...
    auto opt = optimizers::SGD(o);
    const std::uint64_t before = rule_sets();
    EXPECT_EQ(step(*opt, w), 0.5f);
    EXPECT_EQ(step(*opt, w), 0.25f);
    EXPECT_EQ(step(*opt, w), 0.125f);
    EXPECT_EQ(rule_sets() - before, 3u) << "a function's rate, written each step";
  }
  {
    Variable w(Tensor::zeros({1}), "w");
    auto opt = optimizers::SGD(0.5);
    const std::uint64_t before = rule_sets();
    EXPECT_EQ(step(*opt, w), 0.5f);
    opt->set_learning_rate(2.0);
    EXPECT_EQ(step(*opt, w), 2.0f);
    EXPECT_EQ(step(*opt, w), 2.0f);
    opt->set_learning_rate(1.0);
    EXPECT_EQ(step(*opt, w), 1.0f);
    EXPECT_EQ(rule_sets() - before, 3u) << "a constant rate, written once, then once per set_learning_rate";
  }
  {
    Variable w(Tensor::zeros({1}), "w");
    auto opt = optimizers::get("sgd", optimizers::schedules::ExponentialDecay(1.0, 1, 0.5));  // 2^-step
    const std::uint64_t before = rule_sets();
    EXPECT_EQ(step(*opt, w), 1.0f);
    opt->set_iterations(3);
    EXPECT_EQ(step(*opt, w), 0.125f);
    EXPECT_EQ(step(*opt, w), 0.0625f);
    opt->set_iterations(1);
    EXPECT_EQ(step(*opt, w), 0.5f);
    EXPECT_EQ(rule_sets() - before, 1u) << "a schedule the device evaluates holds for every count";
    EXPECT_EQ(opt->iterations(), 2);
  }
}

// Under gradient accumulation a rate set after a held-back batch is the next group's, as one set
// after the group's last batch: the group begun keeps the numbers it derived. Before, the next
// batch derived them again, with the new rate, and counted the step on the device a second time
// (Adam's bias correction then a step ahead of the host's count); jit_compile's replays did
// neither. The weights of the two fits are equal, bit for bit.
TEST(StepState, ARateSetWithinAnAccumulationGroupIsTheNextGroupsAndCountsNothing) {
  const auto weights_after = [](std::int64_t set_after_batch) {
    set_random_seed(7);
    Sequential m({layers::Dense(8, "relu", 4), layers::Dense(2, "softmax")}, "mlp");
    m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
    optimizers::Optimizer& opt = *m.optimizer();
    const auto setter = std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_train_batch_end = [&opt, set_after_batch](std::int64_t batch, const Logs&) {
          if (batch == set_after_batch) opt.set_learning_rate(2e-3);
        }});
    m.fit(inputs(64, 4), labels(64, 2), {.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0,
                                         .callbacks = {setter}, .gradient_accumulation_steps = 2});
    EXPECT_EQ(opt.iterations(), 4);
    std::vector<std::vector<float>> out;
    for (const auto& v : m.variables()) out.push_back(v.read_value().to_vector<float>());
    return out;
  };
  EXPECT_EQ(weights_after(2), weights_after(3)) << "set after group 2's held-back batch, or after its last";
  EXPECT_NE(weights_after(3), weights_after(5)) << "the rate set counts";
}

}  // namespace
}  // namespace lockstep
