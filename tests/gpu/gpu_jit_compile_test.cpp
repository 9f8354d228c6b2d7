// jit_compile on GPU replicas: "auto" says once why train steps run eagerly, naming the device
// and the ops a replay could not repeat, and trains the same bits as jit_compile off (200 steps on
// a GPU: the acceptance check); true is refused by name while the device cannot capture.
// CI runs them on emulated GPUs (gpu.emulated), which capture as real ones do.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "gpu_test_util.hpp"
#include "backend/emulated_gpu.hpp"
#include "lockstep/tensor/kernel_launches.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

// How the test's optimizer takes its numbers: host_rate, its learning rate from a function of
// one's own, which only the host evaluates (not capturable); clipnorm / global_clipnorm > 0, its
// gradients clipped by their norms, which kernels sum and apply on the device (capturable);
// rmsprop, RMSprop (centered, momentum 0.5: its three slots) in Adam's place.
struct OptimizerSetup {
  bool host_rate = false;
  double clipnorm = 0, global_clipnorm = 0;
  bool rmsprop = false;
};

optimizers::OptimizerPtr make_optimizer(const OptimizerSetup& setup) {
  optimizers::OptimizerOptions base;
  base.learning_rate = 1e-2;
  if (setup.host_rate) base.schedule = [](std::int64_t) { return 1e-2; };
  if (setup.clipnorm > 0) base.clipnorm = setup.clipnorm;
  if (setup.global_clipnorm > 0) base.global_clipnorm = setup.global_clipnorm;
  if (setup.rmsprop) {
    optimizers::RMSpropOptions o;
    static_cast<optimizers::OptimizerOptions&>(o) = base;
    o.centered = true;
    o.momentum = 0.5;
    return optimizers::RMSprop(o);
  }
  optimizers::AdamOptions o;
  static_cast<optimizers::OptimizerOptions&>(o) = base;
  return optimizers::Adam(o);
}

std::unique_ptr<Sequential> make_model(JitCompile mode, const OptimizerSetup& setup = {}) {
  set_random_seed(7);  // the same weights for every model made here
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(32, "relu", 12), layers::Dropout(0.25), layers::Dense(4, "softmax")});
  m->compile(make_optimizer(setup), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->set_jit_compile(mode);
  return m;
}

// `steps` steps of fit at global batch 16 on `devices`; the weights after them, on the host.
std::vector<Tensor> trained(JitCompile mode, std::int64_t steps, std::string* reason, std::string* err,
                            const OptimizerSetup& setup = {},
                            const std::vector<std::string>& devices = {"gpu:0"}) {
  const test::Classification d = test::random_classification(16 * steps, 12, 4, 3);
  MirroredStrategy strategy({.devices = devices});
  auto scope = strategy.scope();
  auto model = make_model(mode, setup);
  ::testing::internal::CaptureStderr();
  try {
    model->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .shuffle = false, .verbose = 0});
  } catch (...) {
    *err = ::testing::internal::GetCapturedStderr();  // the capture ends: the next test may open one
    throw;
  }
  *err = ::testing::internal::GetCapturedStderr();
  *reason = model->jit_compile_reason();
  std::vector<Tensor> out;
  for (const auto& v : model->variables())  // on the host: the strategy's devices go with it
    out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
  return out;
}

// A model every op of whose train step can be captured: no weights to update, no labels read.
std::unique_ptr<Sequential> weightless(JitCompile mode) {
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Rescaling(0.5f, 0.25f), layers::Activation("tanh")});
  m->compile(optimizers::SGD(0.0), losses::MeanSquaredError(), {"mae"});
  m->set_jit_compile(mode);
  return m;
}

// jit_compile's reason after fit's first steps on gpu:0 of the model `make` builds (in the
// strategy's scope): the device's refusal and the ops a replay could not repeat.
std::string reason_after_fit(const std::function<std::unique_ptr<Model>()>& make, const Tensor& x,
                             const Tensor& y) {
  MirroredStrategy strategy({.devices = {"gpu:0"}});
  auto scope = strategy.scope();
  auto model = make();
  ::testing::internal::CaptureStderr();
  model->fit(x, y, {.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0});
  (void)::testing::internal::GetCapturedStderr();
  return model->jit_compile_reason();
}

// Float inputs of `shape` per example and float targets (n, 4): no labels checked on the host.
std::pair<Tensor, Tensor> regression(std::int64_t n, const Shape& shape) {
  const test::Classification d = test::random_classification(n, shape.numel(), 4, 5);
  std::vector<std::int64_t> dims{n};
  for (auto v : shape.dims()) dims.push_back(v);
  return {d.x.reshape(Shape(dims)), Tensor::ones({n, 4})};
}

std::unique_ptr<Model> mlp_with_dropout(optimizers::OptimizerPtr optimizer) {
  auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
      layers::Dense(16, "relu", 12), layers::Dropout(0.25), layers::Dense(4)});
  m->compile(std::move(optimizer), losses::MeanSquaredError());
  return m;
}

std::unique_ptr<Model> compiled(std::unique_ptr<Functional> m) {
  m->compile(optimizers::Adam(1e-3), losses::MeanSquaredError());
  return m;
}

}  // namespace

// fit's train step keys dropout (Dropout, attention's) by the replica's step block on the device:
// nothing of an MLP with Dropout or of a small ViT / causal transformer, dropping or not, keeps
// the step from being captured (attention without dropout never did).
TEST(GpuJitCompile, DropoutAndAttentionInFitLeaveNothingThatKeepsTheStepFromBeingCaptured) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  const auto expect_no_blocker = [&](const std::string& what, const std::string& reason) {
    EXPECT_FALSE(has(reason, "the op '")) << what << ": " << reason;
    EXPECT_FALSE(has(reason, "set by the host")) << what << ": " << reason;
    if (!refusal.empty()) {
      EXPECT_EQ(reason, refusal) << what;
    }
  };
  const auto [x, y] = regression(16, Shape{12});
  expect_no_blocker("MLP, Adam", reason_after_fit([] { return mlp_with_dropout(optimizers::Adam(1e-2)); }, x, y));
  expect_no_blocker("MLP, Adam on a schedule", reason_after_fit([] {
    optimizers::AdamOptions o;
    o.schedule = optimizers::schedules::ExponentialDecay(1e-2, 4, 0.5);
    return mlp_with_dropout(optimizers::Adam(o));
  }, x, y));
  const auto [images, image_targets] = regression(16, Shape{8, 8, 1});
  for (const float rate : {0.0f, 0.2f}) {
    expect_no_blocker("ViT", reason_after_fit([rate] {
      return compiled(applications::ViT({.input_shape = {8, 8, 1}, .classes = 4, .patch_size = 4, .dim = 8,
                                         .num_heads = 2, .depth = 1, .mlp_dim = 8, .dropout = rate,
                                         .classifier_activation = "linear"}));
    }, images, image_targets));
    const auto [sequences, targets] = regression(16, Shape{6, 8});
    expect_no_blocker("causal attention", reason_after_fit([rate] {
      const KerasTensor in = Input({6, 8});
      const KerasTensor a = call(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .dropout = rate}),
                                 {in, in}, {.use_causal_mask = true});
      const KerasTensor out = call(layers::Dense(4), call(layers::Flatten(), call(layers::Add(), {in, a})));
      return compiled(std::make_unique<Functional>(in, out, "gpt", 3));
    }, sequences, targets));
    // Padded tokens: Embedding(mask_zero)'s mask reaches the attention as its query and value
    // masks (combined on the device) and GlobalAveragePooling1D as the attention's output's.
    std::vector<float> tv(16 * 6, 0.0f);
    for (std::size_t r = 0; r < 16; ++r)
      for (std::size_t i = 0; i < 1 + r % 6; ++i) tv[r * 6 + i] = static_cast<float>(1 + (r + 3 * i) % 8);
    expect_no_blocker("padded causal attention", reason_after_fit([rate] {
      const KerasTensor in = Input({6});
      const KerasTensor e = call(layers::Embedding(9, 8, /*mask_zero=*/true), in);
      const KerasTensor a = call(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4, .dropout = rate}),
                                 {e, e}, {.use_causal_mask = true});
      const KerasTensor out = call(layers::Dense(4), call(layers::GlobalAveragePooling1D(), call(layers::Add(), {e, a})));
      return compiled(std::make_unique<Functional>(in, out, "padded_gpt", 3));
    }, Tensor::from_vector(tv, {16, 6}), targets));
  }
}

// An attention block whose step permutes axes (Permute around a Dense over the tokens, as
// MLP-Mixer's token mixing; Softmax over the tokens): transpose takes its permutation as its
// kernel's parameters, not an index copied from the host, so jit_compile=True captures the train
// step, and the replays train the bits of eager steps.
TEST(GpuJitCompile, AnAttentionBlockThatTransposesIsCapturedAndTrainsTheBitsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const auto [sequences, targets] = regression(32, Shape{6, 8});
  const auto train = [&](JitCompile mode, std::string* reason) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    set_random_seed(5);
    const KerasTensor in = Input({6, 8});
    const KerasTensor x = call(layers::Add(), {in, call(layers::MultiHeadAttention({.num_heads = 2, .key_dim = 4}),
                                                        {in, in})});
    const KerasTensor tokens = call(layers::Permute({2, 1}), x);  // [8, 6]: a Dense over the tokens
    const KerasTensor mixed = call(layers::Permute({2, 1}), call(layers::Softmax(1), call(layers::Dense(6), tokens)));
    const KerasTensor out = call(layers::Dense(4), call(layers::Flatten(), call(layers::Add(), {x, mixed})));
    auto model = std::make_unique<Functional>(in, out, "mixer", 3);
    model->compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
    model->set_jit_compile(mode);
    ::testing::internal::CaptureStderr();
    model->fit(sequences, targets, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
    (void)::testing::internal::GetCapturedStderr();
    *reason = model->jit_compile_reason();
    std::vector<Tensor> weights;
    for (const auto& v : model->variables())
      weights.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return weights;
  };
  std::string on_reason, off_reason;
  const auto captured = train(JitCompile::kOn, &on_reason);  // throws, naming why, where it cannot capture
  const auto eager = train(JitCompile::kOff, &off_reason);
  EXPECT_EQ(on_reason, "");
  ASSERT_EQ(captured.size(), eager.size());
  for (std::size_t i = 0; i < captured.size(); ++i) EXPECT_TRUE(captured[i].bitwise_equal(eager[i])) << i;
}

// A step keeps the model's variables from the step before (no vector made per step); a layer
// added after captured steps changes them, so the step is checked and captured again: the new
// layer's kernel is trained (a replay of the old graph would leave it as it was).
TEST(GpuJitCompile, ALayerAddedAfterCapturedStepsIsCapturedAnewAndTrained) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const auto [x, y] = regression(16, Shape{12});
  MirroredStrategy strategy({.devices = {"gpu:0"}});
  auto scope = strategy.scope();
  Sequential model({layers::Dense(8, "relu", 12), layers::Dense(4)});
  model.compile(optimizers::SGD(0.1), losses::MeanSquaredError());
  model.set_jit_compile(JitCompile::kOn);  // throws, naming why, where a step cannot be captured
  for (int i = 0; i < 3; ++i) (void)model.train_step(x, y);
  model.add(layers::Dense(4));
  const Variable added = model.layers().back()->variables().front();
  const std::vector<float> before = added.read_value().to_vector<float>();
  for (int i = 0; i < 3; ++i) (void)model.train_step(x, y);
  EXPECT_NE(added.read_value().to_vector<float>(), before) << "the added layer's kernel was not updated";
  EXPECT_EQ(model.jit_compile_reason(), "");
}

TEST(GpuJitCompile, AutoSaysOnceWhyStepsRunEagerlyAndTrainsTheBitsOfOff) {
  LOCKSTEP_REQUIRE_GPU();
  std::string reason, err, off_reason, off_err;
  const auto captured = trained(JitCompile::kAuto, 6, &reason, &err, {.host_rate = true});
  const auto eager = trained(JitCompile::kOff, 6, &off_reason, &off_err, {.host_rate = true});
  ASSERT_EQ(captured.size(), eager.size());
  for (std::size_t i = 0; i < captured.size(); ++i) EXPECT_TRUE(captured[i].bitwise_equal(eager[i])) << i;
  // One line for the six steps, naming the model, the device and why: the learning rate comes
  // from a function only the host evaluates, which a replay could not repeat.
  EXPECT_TRUE(has(err, "jit_compile=\"auto\": model '")) << err;
  EXPECT_TRUE(has(err, "runs its train steps eagerly on gpu:0: ")) << err;
  EXPECT_EQ(err.find("jit_compile", err.find("jit_compile") + 1), std::string::npos) << err;
  EXPECT_TRUE(has(reason, "Adam's learning rate comes from")) << reason;
  // The step's numbers, dropout's step included, are read on the device; the labels are checked
  // before each replay.
  EXPECT_FALSE(has(reason, "adam_update")) << reason;
  EXPECT_FALSE(has(reason, "dropout")) << reason;
  EXPECT_FALSE(has(reason, "labels")) << reason;
  EXPECT_EQ(off_err, "");
  EXPECT_EQ(off_reason, "");
}

TEST(GpuJitCompile, TrueIsRefusedNamingTheDeviceOrTheOp) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  std::string reason, err;
  const std::string msg = message_of([&] { trained(JitCompile::kOn, 2, &reason, &err, {.host_rate = true}); });
  if (!refusal.empty())  // before any step
    EXPECT_TRUE(has(msg, "jit_compile=True: train steps on gpu:0 cannot be captured into a graph: " + refusal)) << msg;
  else  // after the checked step
    EXPECT_TRUE(has(msg, "the train step cannot be captured into a graph: ") && has(msg, "learning rate")) << msg;
}

// Clipping by norm (each gradient's and the global one) is summed and applied on the device:
// the step is captured where the GPU can capture, and trains the bits of jit_compile off.
TEST(GpuJitCompile, ClippedStepsAreCapturedAndTrainTheBitsOfOff) {
  LOCKSTEP_REQUIRE_GPU();
  const OptimizerSetup clipped{.clipnorm = 0.05, .global_clipnorm = 0.08};  // small: every step clips
  std::string reason, err, off_reason, off_err;
  const auto with = trained(JitCompile::kAuto, 40, &reason, &err, clipped);
  const auto without = trained(JitCompile::kOff, 40, &off_reason, &off_err, clipped);
  if (step_capture_refusal(Device::parse("gpu:0")).empty()) {
    EXPECT_EQ(reason, "");
  }
  EXPECT_FALSE(has(reason, "clip")) << reason;
  EXPECT_FALSE(has(reason, "sum_squares")) << reason;
  ASSERT_EQ(with.size(), without.size());
  for (std::size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(with[i].bitwise_equal(without[i])) << i;
}

// RMSprop's steps (centered, with momentum: three slots, the rate read from the step block) are
// captured and train the bits of jit_compile off, on one replica and on two logical replicas of
// gpu:0; those are the bits of one and two CPU replicas where the GPUs are emulated (the CPU's
// kernels), and within float32 rounding of them on CUDA.
TEST(GpuJitCompile, RMSpropTrainsTheBitsOfOffAndOfTheCpuOnOneAndTwoReplicas) {
  LOCKSTEP_REQUIRE_GPU();
  const OptimizerSetup rmsprop{.rmsprop = true};
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> layouts = {
      {{"gpu:0"}, {"cpu:0"}}, {{"gpu:0x2"}, {"cpu:0", "cpu:1"}}};
  for (const auto& [gpu, cpu] : layouts) {
    SCOPED_TRACE(gpu[0]);
    std::string reason, err, off_reason, off_err, cpu_reason, cpu_err;
    const auto with = trained(JitCompile::kAuto, 40, &reason, &err, rmsprop, gpu);
    const auto without = trained(JitCompile::kOff, 40, &off_reason, &off_err, rmsprop, gpu);
    const auto on_cpu = trained(JitCompile::kOff, 40, &cpu_reason, &cpu_err, rmsprop, cpu);
    if (step_capture_refusal(Device::parse("gpu:0")).empty()) {
      EXPECT_EQ(reason, "");
    }
    EXPECT_FALSE(has(reason, "rmsprop")) << reason;
    ASSERT_EQ(with.size(), without.size());
    ASSERT_EQ(with.size(), on_cpu.size());
    for (std::size_t i = 0; i < with.size(); ++i) {
      EXPECT_TRUE(with[i].bitwise_equal(without[i])) << i;
      if (emulated) {
        EXPECT_TRUE(without[i].bitwise_equal(on_cpu[i])) << i;
        continue;
      }
      const std::vector<float> g = without[i].to_vector<float>(), c = on_cpu[i].to_vector<float>();
      for (std::size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(g[j], c[j], 1e-4 * (1 + std::fabs(c[j]))) << i << " " << j;
    }
  }
}

// The acceptance check of issue 37: with jit_compile on and off, the weights after 200 steps
// are bit-identical, on gpu:0 and on its four logical replicas. Where this GPU cannot capture
// yet, "auto" runs eagerly and says why (the reason is printed for scripts/gpu_check.sh's log),
// and the check still holds.
TEST(GpuJitCompile, WeightsAfter200StepsAreBitIdenticalWithAndWithoutCapture) {
  LOCKSTEP_REQUIRE_GPU();  // emulated GPUs capture as real ones do (a recording of the CPU's kernels)
  std::string reason, err, off_reason, off_err;
  for (const std::string devices : {"gpu:0", "gpu:0x4"}) {  // one replica, and four logical ones (one graph)
    const auto with = trained(JitCompile::kAuto, 200, &reason, &err, {}, {devices});
    const auto without = trained(JitCompile::kOff, 200, &off_reason, &off_err, {}, {devices});
    std::printf("jit_compile auto on %s: %s\n", devices.c_str(),
                reason.empty() ? "captured" : ("eager: " + reason).c_str());
    ASSERT_EQ(with.size(), without.size());
    for (std::size_t i = 0; i < with.size(); ++i) EXPECT_TRUE(with[i].bitwise_equal(without[i])) << devices << " " << i;
  }
}

// A step whose every op can be captured (no weights to update, no labels to check on the host):
// "auto" captures it, and fit's replays, each on its own batch, give the losses and metrics of
// eager steps, bit for bit; the last, shorter batch gets a graph of its own; an execution of
// several steps (steps_per_execution) keeps each replayed step's numbers.
TEST(GpuJitCompile, FitReplaysACapturableStepWithTheNumbersOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const Tensor x = test::random_uniform({44, 6}, 11), y = test::random_uniform({44, 6}, 12);
  const auto run = [&](JitCompile mode, std::string* reason, std::int64_t steps_per_execution = 1) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    auto m = weightless(mode);
    m->set_steps_per_execution(steps_per_execution);
    const History h = m->fit(x, y, {.epochs = 3, .batch_size = 8, .shuffle = false, .verbose = 0});
    *reason = m->jit_compile_reason();
    return h;
  };
  std::string on_reason, off_reason, spe_reason;
  const History off = run(JitCompile::kOff, &off_reason);
  ::testing::internal::CaptureStderr();
  History on, on_spe;
  try {
    on = run(JitCompile::kAuto, &on_reason);
    on_spe = run(JitCompile::kAuto, &spe_reason, 3);
  } catch (...) {
    (void)::testing::internal::GetCapturedStderr();
    throw;
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(on.history.at("loss"), off.history.at("loss"));
  EXPECT_EQ(on.history.at("mae"), off.history.at("mae"));
  EXPECT_EQ(on_spe.history.at("loss"), off.history.at("loss"));
  EXPECT_EQ(on_spe.history.at("mae"), off.history.at("mae"));
  EXPECT_EQ(on_reason, "");  // captured
  EXPECT_EQ(spe_reason, "");
  EXPECT_EQ(err, "");         // nothing to say
}

// Replicas on two GPUs reduce through peer copies the host waits for (NCCL on real ones): "auto"
// runs their steps eagerly naming why, and true is refused naming it.
TEST(GpuJitCompile, ReplicasOnSeveralGpusRunEagerlyNamingTheirCollectives) {
  LOCKSTEP_REQUIRE_GPUS(2);
  const Tensor x = test::random_uniform({16, 6}, 11), y = test::random_uniform({16, 6}, 12);
  MirroredStrategy strategy({.devices = {"gpu:0", "gpu:1"}});
  auto scope = strategy.scope();
  auto m = weightless(JitCompile::kAuto);
  ::testing::internal::CaptureStderr();
  m->fit(x, y, {.epochs = 1, .batch_size = 8, .shuffle = false, .verbose = 0});
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string reason = m->jit_compile_reason();
  EXPECT_TRUE(has(reason, "the collectives of its 2 replicas are not captured: they are on gpu:0 and gpu:1")) << reason;
  EXPECT_TRUE(has(err, "runs its train steps eagerly on gpu:0")) << err;
  auto on = weightless(JitCompile::kOn);
  const std::string msg = message_of([&] { on->fit(x, y, {.epochs = 1, .batch_size = 8, .verbose = 0}); });
  EXPECT_TRUE(has(msg, "jit_compile=True: model '")) << msg;
  EXPECT_TRUE(has(msg, "the collectives of its 2 replicas are not captured")) << msg;
}

namespace {
// A classifier with no dropout (unless asked): its labels checked on the host, its Adam steps
// read their numbers (a decaying rate, unless `scheduled` is false: a constant one the host may
// set; bias corrections) from the step block, as dropout reads the step: every op can be captured.
std::unique_ptr<Sequential> classifier(JitCompile mode, bool dropout = false, bool scheduled = true) {
  set_random_seed(7);
  std::vector<layers::LayerPtr> layers{layers::Dense(32, "relu", 12), layers::Dense(4, "softmax")};
  if (dropout) layers.insert(layers.begin() + 1, layers::Dropout(0.25));
  auto m = std::make_unique<Sequential>(std::move(layers));
  optimizers::AdamOptions o;
  o.learning_rate = 1e-2;
  if (scheduled) o.schedule = optimizers::schedules::ExponentialDecay(1e-2, 10, 0.9);
  m->compile(optimizers::Adam(o), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->set_jit_compile(mode);
  return m;
}

// The classifier fit on `devices` (batch 16, no shuffling): its weights after, on the host, its
// history and jit_compile's reason.
std::vector<Tensor> fit_classifier(const MirroredOptions& devices, JitCompile mode, const Tensor& x, const Tensor& y,
                                   int epochs, std::string* reason, History* h) {
  MirroredStrategy strategy(devices);
  auto scope = strategy.scope();
  auto m = classifier(mode);
  *h = m->fit(x, y, {.epochs = epochs, .batch_size = 16, .shuffle = false, .verbose = 0});
  *reason = m->jit_compile_reason();
  std::vector<Tensor> out;
  for (const auto& v : m->variables()) out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
  return out;
}
}  // namespace

// A classifier's steps are replayed (labels checked on the host before each replay, the Adam
// numbers read on the device): the weights after 63 steps (two graphs: the short last batch has
// its own, replayed between the other's replays) and every epoch's loss and accuracy are those of
// eager steps, bit for bit; a label out of range in a replayed step is refused with the eager
// step's message.
TEST(GpuJitCompile, AClassifierIsReplayedWithTheBitsOfEagerStepsAndItsLabelsChecked) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 20 + 5, 12, 4, 3);
  const auto run = [&](JitCompile mode, const Tensor& y, std::string* reason, History* h) {
    return fit_classifier({.devices = {"gpu:0"}}, mode, d.x, y, 3, reason, h);
  };
  std::string on_reason, off_reason;
  History on, off;
  const auto eager = run(JitCompile::kOff, d.y, &off_reason, &off);
  const auto replayed = run(JitCompile::kAuto, d.y, &on_reason, &on);
  EXPECT_EQ(on_reason, "");  // captured
  ASSERT_EQ(replayed.size(), eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << i;
  EXPECT_EQ(on.history.at("loss"), off.history.at("loss"));
  EXPECT_EQ(on.history.at("accuracy"), off.history.at("accuracy"));
  // Batch 5 (a replayed step) holds a label of 9 among 4 classes.
  std::vector<std::int64_t> labels = d.y.to_vector<std::int64_t>();
  labels[16 * 5 + 3] = 9;
  const Tensor bad = Tensor::from_vector(labels, {static_cast<std::int64_t>(labels.size())});
  std::string reason;
  History h;
  const std::string msg = message_of([&] { run(JitCompile::kAuto, bad, &reason, &h); });
  EXPECT_TRUE(has(msg, "label 9 at index 3 is outside [0, 4)")) << msg;
}

// A rate the host sets between steps is the rate of the replays after it: A LearningRateScheduler's
// rate per epoch (on the classifier's constant rate: a schedule's is not settable) and a rate set at a batch's end,
// mid-epoch, train the weights and losses of eager steps, bit for bit, on gpu:0 and its two logical
// replicas (one graph). Once, replays kept the rate of their capture, silently.
TEST(GpuJitCompile, ARateSetBetweenStepsIsTheRateOfTheReplaysAfterIt) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 12, 12, 4, 3);
  const auto run = [&](const std::string& devices, JitCompile mode, std::string* reason, History* h) {
    MirroredStrategy strategy({.devices = {devices}});
    auto scope = strategy.scope();
    auto m = classifier(mode, false, /*scheduled=*/false);
    optimizers::Optimizer& opt = *m->optimizer();
    const auto scheduler =
        std::make_shared<LearningRateScheduler>([](int epoch, double) { return epoch == 0 ? 1e-2 : 4e-3 / epoch; });
    const auto mid_epoch = std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_train_batch_end = [&](std::int64_t batch, const Logs&) {
          if (batch == 5) opt.set_learning_rate(opt.current_learning_rate() * 0.5);
        }});
    *h = m->fit(d.x, d.y, {.epochs = 3, .batch_size = 16, .shuffle = false, .verbose = 0,
                           .callbacks = {scheduler, mid_epoch}});
    *reason = m->jit_compile_reason();
    std::vector<Tensor> out;
    for (const auto& v : m->variables()) out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return out;
  };
  for (const std::string devices : {"gpu:0", "gpu:0x2"}) {
    std::string on_reason, off_reason;
    History on, off;
    const auto eager = run(devices, JitCompile::kOff, &off_reason, &off);
    const auto replayed = run(devices, JitCompile::kAuto, &on_reason, &on);
    EXPECT_EQ(on_reason, "") << devices;  // captured
    ASSERT_EQ(replayed.size(), eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << devices << " " << i;
    EXPECT_EQ(on.history.at("loss"), off.history.at("loss")) << devices;
  }
}

namespace {
// What a fit under rates and counts the host sets between steps leaves.
struct HostSetFit {
  std::vector<Tensor> weights;  // on the host
  History history;
  std::string reason;
  double rate = 0;  // the optimizer's learning rate after
  std::int64_t iterations = 0;
  std::uint64_t captures = 0;    // step graphs captured on gpu:0 during the fit
  std::uint64_t rule_sets = 0;   // step_rule_set kernels run on gpu:0 during the fit
};

// The classifier (Adam, ExponentialDecay unless `scheduled` is false) fit on `devices` (batch 16, no
// shuffling) with `callbacks` given the model's optimizer.
HostSetFit fit_with_host_sets(const std::string& devices, JitCompile mode, const test::Classification& d, int epochs,
                              bool scheduled,
                              const std::function<std::vector<CallbackPtr>(optimizers::Optimizer&)>& callbacks) {
  const Device gpu0 = Device::parse("gpu:0");
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  auto m = classifier(mode, false, scheduled);
  optimizers::Optimizer& opt = *m->optimizer();
  HostSetFit r;
  const std::uint64_t captures = detail::step_captures(gpu0);
  const std::uint64_t rule_sets = detail::kernel_launches(gpu0, "step_rule_set");
  r.history = m->fit(d.x, d.y, {.epochs = epochs, .batch_size = 16, .shuffle = false, .verbose = 0,
                                .callbacks = callbacks(opt)});
  r.captures = detail::step_captures(gpu0) - captures;
  r.rule_sets = detail::kernel_launches(gpu0, "step_rule_set") - rule_sets;
  r.reason = m->jit_compile_reason();
  r.rate = opt.current_learning_rate();
  r.iterations = opt.iterations();
  for (const auto& v : m->variables())
    r.weights.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
  return r;
}

// jit_compile true against off: the same weights and losses, bit for bit, the same rate and
// count after, and the rule written as often (before steps, on the host's word: never by a
// replay); `graphs` captures in all, one per signature, however often the host set something.
void expect_captured_with_the_bits_of_eager_steps(const std::string& devices, const test::Classification& d,
                                                  int epochs, std::uint64_t graphs, bool scheduled,
                                                  const std::function<std::vector<CallbackPtr>(optimizers::Optimizer&)>& callbacks) {
  const HostSetFit off = fit_with_host_sets(devices, JitCompile::kOff, d, epochs, scheduled, callbacks);
  const HostSetFit on = fit_with_host_sets(devices, JitCompile::kOn, d, epochs, scheduled, callbacks);
  EXPECT_EQ(on.reason, "") << devices;
  EXPECT_EQ(off.captures, 0u) << devices;
  EXPECT_EQ(on.captures, graphs) << devices;
  EXPECT_EQ(on.rule_sets, off.rule_sets) << devices;
  EXPECT_EQ(on.rate, off.rate) << devices;
  EXPECT_EQ(on.iterations, off.iterations) << devices;
  EXPECT_EQ(on.history.history.at("loss"), off.history.history.at("loss")) << devices;
  ASSERT_EQ(on.weights.size(), off.weights.size());
  for (std::size_t i = 0; i < off.weights.size(); ++i)
    EXPECT_TRUE(on.weights[i].bitwise_equal(off.weights[i])) << devices << " " << i;
}
}  // namespace

// The learning rate lives in each replica's step block, which the host writes before a step when
// it set a rate: a rate set between steps, every epoch and mid-epoch, is read there by the
// replays after it, and no step is captured anew (one graph for the fit's one signature; before,
// each rate dropped the graphs and captured the next step again). Three epochs of 12 batches
// under jit_compile true train the bits of off, on gpu:0 and its two logical replicas.
TEST(GpuJitCompile, ARateSetBetweenStepsIsReadFromTheStepBlockWithoutACaptureAnew) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 12, 12, 4, 3);
  for (const std::string devices : {"gpu:0", "gpu:0x2"})
    expect_captured_with_the_bits_of_eager_steps(devices, d, 3, 1, /*scheduled=*/false, [](optimizers::Optimizer& opt) {
      return std::vector<CallbackPtr>{
          std::make_shared<LearningRateScheduler>([](int epoch, double) { return 1e-2 / (epoch + 1); }),
          std::make_shared<LambdaCallback>(LambdaCallbackOptions{.on_train_batch_end = [&opt](std::int64_t batch,
                                                                                              const Logs&) {
            if (batch % 4 == 1) opt.set_learning_rate(opt.current_learning_rate() * 0.75);
          }})};
    });
}

// Keras' two rate callbacks together: a LearningRateScheduler's rate at each epoch's start and
// ReduceLROnPlateau's halving at the end of each epoch after the first (no loss improves by 100),
// under jit_compile true, train the bits of off with one capture, and leave the same rate.
TEST(GpuJitCompile, ALearningRateSchedulerAndReduceLROnPlateauTrainTheBitsOfEagerStepsCapturedOnce) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 8, 12, 4, 3);
  for (const std::string devices : {"gpu:0", "gpu:0x2"})
    expect_captured_with_the_bits_of_eager_steps(devices, d, 4, 1, /*scheduled=*/false, [](optimizers::Optimizer&) {
      return std::vector<CallbackPtr>{
          std::make_shared<LearningRateScheduler>([](int epoch, double lr) { return epoch == 0 ? 1e-2 : lr * 0.8; }),
          std::make_shared<ReduceLROnPlateau>(
              ReduceLROnPlateauOptions{.monitor = "loss", .factor = 0.5, .patience = 1, .min_delta = 100})};
    });
}

// The classifier's Adam under an ExponentialDecay (its rate derived on the device from the
// block's count and rule) with the count set between steps (mid-epoch and at each epoch's end):
// the rule, written once, holds for every step, the replays count from the host's count, and the
// fit's two signatures (batches of 16 and the short last one of 5) are captured once each.
TEST(GpuJitCompile, AnExponentialDecayCountsFromIterationsSetBetweenStepsWithoutACaptureAnew) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 7 + 5, 12, 4, 3);
  for (const std::string devices : {"gpu:0", "gpu:0x2"})
    expect_captured_with_the_bits_of_eager_steps(devices, d, 3, 2, /*scheduled=*/true, [](optimizers::Optimizer& opt) {
      return std::vector<CallbackPtr>{std::make_shared<LambdaCallback>(LambdaCallbackOptions{
          .on_epoch_end = [&opt](int, const Logs&) { opt.set_iterations(opt.iterations() + 25); },
          .on_train_batch_end = [&opt](std::int64_t batch, const Logs&) {
            if (batch == 3) opt.set_iterations(opt.iterations() * 2);
          }})};
    });
}

namespace {
// The classifier (with dropout) fit for 2 epochs of 41 batches (40 of 16 and one of 5, no
// shuffling) under gradient accumulation, on `devices` through a strategy or, where empty, on
// gpu:0 without one (the model then holds the group's sums itself); its weights after, on the
// host, and jit_compile's reason.
std::vector<Tensor> fit_accumulating(const std::string& devices, JitCompile mode, int accumulation,
                                     std::int64_t steps_per_execution, History* h, std::string* reason) {
  const test::Classification d = test::random_classification(16 * 40 + 5, 12, 4, 3);
  const auto fit = [&] {
    auto m = classifier(mode, true);
    m->set_steps_per_execution(steps_per_execution);
    *h = m->fit(d.x, d.y, {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0,
                           .gradient_accumulation_steps = accumulation});
    *reason = m->jit_compile_reason();
    std::vector<Tensor> out;
    for (const auto& v : m->variables())
      out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return out;
  };
  if (devices.empty()) {
    const auto gpu = make_compute_context(Device{DeviceKind::kCuda, 0});
    ComputeScope scope(*gpu);
    return fit();
  }
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  return fit();
}
}  // namespace

// Gradient accumulation under jit_compile "auto": every batch of a group is replayed, the ones
// held back too (the group's first copies its gradients into the sums' memory, a later one adds
// into it, the last adds it to its own and applies), and the weights and every epoch's loss and
// accuracy are those of eager steps, bit for bit, on gpu:0 (with and without a strategy) and its
// two logical replicas, for groups of 2 and 3 batches, one step or three per execution. The
// short last group (41 = 20 * 2 + 1 = 13 * 3 + 2, its last batch of 5) has graphs of its own. On
// emulated GPUs the replays are counted: every step after the first group's (run eagerly: the
// check, and the sums' memory made) of both epochs.
TEST(GpuJitCompile, GradientAccumulationTrainsTheBitsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  for (const std::string devices : {"", "gpu:0", "gpu:0x2"}) {
    for (const int accumulation : {2, 3}) {
      for (const std::int64_t spe : {1, 3}) {
        SCOPED_TRACE((devices.empty() ? "gpu:0 without a strategy" : devices) + ", accumulation " +
                     std::to_string(accumulation) + ", steps_per_execution " + std::to_string(spe));
        History on, off;
        std::string on_reason, off_reason;
        const auto eager = fit_accumulating(devices, JitCompile::kOff, accumulation, spe, &off, &off_reason);
        const backend::EmulatedReplays before = backend::emulated_replays();
        const auto replayed = fit_accumulating(devices, JitCompile::kAuto, accumulation, spe, &on, &on_reason);
        const backend::EmulatedReplays after = backend::emulated_replays();
        EXPECT_EQ(on_reason, "");  // captured, every batch
        ASSERT_EQ(replayed.size(), eager.size());
        for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << i;
        EXPECT_EQ(on.history.at("loss"), off.history.at("loss"));
        EXPECT_EQ(on.history.at("accuracy"), off.history.at("accuracy"));
        if (emulated) {
          const std::int64_t replays = 2 * 41 - accumulation;
          EXPECT_EQ(after.graphs - before.graphs, replays);
          EXPECT_EQ(after.lanes - before.lanes, replays * (devices == "gpu:0x2" ? 2 : 1));
        }
      }
    }
  }
}

// One model fit three times, on gpu:0 through a strategy: without accumulation (its steps
// captured), then twice with groups of 3. The second fit's first batch held back runs eagerly
// (the sums have no memory yet: a capture makes none that outlives it), every later one is
// replayed; the third fit replays all of its batches, writing the sums the second made (the model
// keeps them: its graphs outlive a fit). The weights are those of eager steps, bit for bit.
TEST(GpuJitCompile, FitsOfOneModelWithAndWithoutAccumulationTrainTheBitsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  const test::Classification d = test::random_classification(16 * 12, 12, 4, 3);
  std::vector<std::int64_t> replays;
  const auto run = [&](JitCompile mode) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    auto m = classifier(mode, true);
    for (const int accumulation : {1, 3, 3}) {
      const backend::EmulatedReplays before = backend::emulated_replays();
      m->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .shuffle = false, .verbose = 0,
                        .gradient_accumulation_steps = accumulation});
      replays.push_back(backend::emulated_replays().graphs - before.graphs);
    }
    std::vector<Tensor> out;
    for (const auto& v : m->variables()) out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return out;
  };
  const auto eager = run(JitCompile::kOff);
  replays.clear();
  const auto replayed = run(JitCompile::kAuto);
  ASSERT_EQ(replayed.size(), eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << i;
  if (emulated) {
    EXPECT_EQ(replays, (std::vector<std::int64_t>{11, 11, 12}));
  }
}

// A custom loop that holds a micro-batch's gradients back under no_sync, then calls train_step on
// the next: the train step adds the strategy's held sums, which its input signature does not
// describe, so it runs eagerly under jit_compile "auto" too, said once and kept as the reason: the
// weights are eager steps' bits, and differ from the same loop without the held-back batches (the
// sums were added). Under true the step is refused by name, as an op that cannot be captured.
TEST(GpuJitCompile, ATrainStepAfterACustomLoopsHeldBackGradientsTrainsTheBitsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 12, 12, 4, 3);
  const Device gpu{DeviceKind::kCuda, 0};
  std::string reason;
  const auto run = [&](JitCompile mode, bool hold_back) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    auto m = classifier(mode);
    m->build(Shape{-1, 12});
    const auto vars = m->trainable_variables();
    for (std::int64_t b = 0; b < 12; b += 2) {
      const Tensor x = d.x.slice(16 * b, 16 * (b + 1)), y = d.y.slice(16 * b, 16 * (b + 1));
      if (hold_back)
        strategy.run_void([&](ReplicaContext& rc) {
          auto quiet = rc.no_sync();
          GradientTape tape;
          const auto out = m->forward(x.to(gpu), layers::CallContext{.replica = &rc});
          const Tensor loss = distribute::compute_average_loss(
              m->loss()->per_example(y.to(gpu), out.output, out.logits), 32);
          auto grads = tape.gradient(loss, vars);
          EXPECT_FALSE(rc.all_reduce_gradients(grads, vars));  // held back
        });
      m->train_step(d.x.slice(16 * (b + 1), 16 * (b + 2)), d.y.slice(16 * (b + 1), 16 * (b + 2)));
    }
    reason = m->jit_compile_reason();
    std::vector<Tensor> out;
    for (const auto& v : m->variables()) out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return out;
  };
  const auto eager = run(JitCompile::kOff, true);
  ::testing::internal::CaptureStderr();
  const auto replayed = run(JitCompile::kAuto, true);
  const std::string err = ::testing::internal::GetCapturedStderr(), auto_reason = reason;
  const auto without = run(JitCompile::kOff, false);
  ASSERT_EQ(replayed.size(), eager.size());
  bool differ = false;
  for (std::size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << i;
    differ = differ || !without[i].bitwise_equal(eager[i]);
  }
  EXPECT_TRUE(differ) << "the held-back gradients were not added";
  const std::string why = "a step adding gradients that a custom loop held back under no_sync is not replayed";
  EXPECT_TRUE(has(auto_reason, why)) << auto_reason;
  const std::string line = "runs some of its train steps eagerly on gpu:0: " + why;
  EXPECT_TRUE(has(err, line)) << err;
  EXPECT_EQ(err.find(line), err.rfind(line)) << "said once: " << err;
  const std::string msg = message_of([&] { run(JitCompile::kOn, true); });
  EXPECT_TRUE(has(msg, "jit_compile=True: model '")) << msg;
  EXPECT_TRUE(has(msg, "the train step cannot be captured into a graph: " + why)) << msg;
}

// Logical replicas of one GPU (gpu:0x2, gpu:0x4) capture their step as one graph, forked from
// replica 0's queue, their collectives' fences its edges, replayed by one launch: the weights
// after every step (check_mirrored: still mirrored), each epoch's loss and accuracy, are those of
// eager steps, bit for bit; emulated GPUs count the replays and the lanes each ran. A label out of
// range in the last replica's slice of a replayed step is refused with the eager step's message.
TEST(GpuJitCompile, LogicalReplicasOfOneGpuCaptureTheirStepAsOneGraph) {
  LOCKSTEP_REQUIRE_GPU();
  const bool emulated = backend::device_kind(DeviceKind::kCuda).emulated();
  // 12 batches of 16 and one of 2 (a graph of its own; on gpu:0x4 two replicas' slices are empty).
  const test::Classification d = test::random_classification(16 * 12 + 2, 12, 4, 3);
  for (const int replicas : {2, 4}) {
    const std::string devices = "gpu:0x" + std::to_string(replicas);
    const auto run = [&](JitCompile mode, const Tensor& y, std::string* reason, History* h) {
      return fit_classifier({.devices = {devices}, .check_mirrored = true}, mode, d.x, y, 2, reason, h);
    };
    std::string on_reason, off_reason;
    History on, off;
    const auto eager = run(JitCompile::kOff, d.y, &off_reason, &off);
    const backend::EmulatedReplays before = backend::emulated_replays();
    const auto replayed = run(JitCompile::kAuto, d.y, &on_reason, &on);
    const backend::EmulatedReplays after = backend::emulated_replays();
    EXPECT_EQ(on_reason, "") << devices;  // captured
    ASSERT_EQ(replayed.size(), eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << devices << " " << i;
    EXPECT_EQ(on.history.at("loss"), off.history.at("loss")) << devices;
    EXPECT_EQ(on.history.at("accuracy"), off.history.at("accuracy")) << devices;
    if (emulated) {  // 26 steps: the first eager (checked), the other 25 one replay each, of every lane
      EXPECT_EQ(after.graphs - before.graphs, 25) << devices;
      EXPECT_EQ(after.lanes - before.lanes, 25 * replicas) << devices;
    }
    std::vector<std::int64_t> labels = d.y.to_vector<std::int64_t>();
    labels[16 * 5 + 15] = 9;  // batch 5's last row: the last replica's slice
    const Tensor bad = Tensor::from_vector(labels, {static_cast<std::int64_t>(labels.size())});
    std::string reason;
    History h;
    const std::string msg = message_of([&] { run(JitCompile::kAuto, bad, &reason, &h); });
    EXPECT_TRUE(has(msg, "is outside [0, 4)")) << devices << ": " << msg;
    EXPECT_TRUE(has(msg, "replica " + std::to_string(replicas - 1))) << devices << ": " << msg;
  }
}

// Replicas whose collectives go through messages on the host (the loopback transport) cannot be
// captured: "auto" says why and trains the bits of eager steps.
TEST(GpuJitCompile, LogicalReplicasMeetingThroughMessagesRunEagerlyNamingWhy) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 3, 12, 4, 3);
  MirroredStrategy strategy({.devices = {"gpu:0x2"}, .cross_device_ops = CollectiveImplementation::kLoopback});
  auto scope = strategy.scope();
  auto m = classifier(JitCompile::kAuto);
  ::testing::internal::CaptureStderr();
  m->fit(d.x, d.y, {.epochs = 1, .batch_size = 16, .shuffle = false, .verbose = 0});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(m->jit_compile_reason(), "the collectives of its 2 replicas are not captured: they meet through "
                                           "messages on the host"))
      << m->jit_compile_reason();
  EXPECT_TRUE(has(err, "runs its train steps eagerly on gpu:0")) << err;
}

// The count set by the host between steps (set_iterations: before the short last batch's first
// step, whose graph is then captured, and between epochs, before graphs are replayed) is what the
// next steps count from, captured or not: the weights and iterations of jit_compile on and off
// are equal, bit for bit (a graph that recorded the host's count would reset it at each replay).
TEST(GpuJitCompile, IterationsSetBetweenStepsAreCountedFromByReplaysAndCaptures) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16 * 6 + 5, 12, 4, 3);
  const auto run = [&](JitCompile mode, std::string* reason, std::int64_t* iterations) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    auto m = classifier(mode);
    optimizers::Optimizer& opt = *m->optimizer();
    const auto hooks = std::make_shared<LambdaCallback>(LambdaCallbackOptions{
        .on_epoch_end = [&](int, const Logs&) { opt.set_iterations(opt.iterations() + 40); },
        .on_train_batch_end = [&](std::int64_t batch, const Logs&) {
          if (batch == 5 && opt.iterations() == 6) opt.set_iterations(3);  // before the short batch
        }});
    m->fit(d.x, d.y, {.epochs = 3, .batch_size = 16, .shuffle = false, .verbose = 0, .callbacks = {hooks}});
    *reason = m->jit_compile_reason();
    *iterations = opt.iterations();
    std::vector<Tensor> out;
    for (const auto& v : m->variables())
      out.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return out;
  };
  std::string on_reason, off_reason;
  std::int64_t on_iterations = 0, off_iterations = 0;
  const auto eager = run(JitCompile::kOff, &off_reason, &off_iterations);
  const auto replayed = run(JitCompile::kAuto, &on_reason, &on_iterations);
  EXPECT_EQ(on_reason, "");  // captured
  EXPECT_EQ(off_iterations, 3 + 1 + 40 + 7 + 40 + 7 + 40);
  EXPECT_EQ(on_iterations, off_iterations);
  ASSERT_EQ(replayed.size(), eager.size());
  for (std::size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(replayed[i].bitwise_equal(eager[i])) << i;
}

// Issue 37: under mixed_float16 the loss scale lives in the step block, so the step is captured;
// a batch with an infinite input skips its step on the device inside replays (the scale halves,
// the count does not move) and growth doubles the scale there; a scale the host sets between
// epochs (set_state, as a checkpoint restores it) is what the next replays start from. The
// weights, the scale, the skipped count and iterations of jit_compile on and off are equal, bit
// for bit, on one replica and on two logical ones; the host reads the device's outcome only when
// asked (the epoch's logs).
TEST(GpuJitCompile, MixedFloat16StepsAreCapturedAndSkipAnOverflowLikeEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  test::Classification d = test::random_classification(16 * 10, 12, 4, 3);
  std::vector<float> xs = d.x.to_vector<float>();
  xs[16 * 12 * 6 + 5] = std::numeric_limits<float>::infinity();  // the seventh batch's first row
  const Tensor x = Tensor::from_vector(xs, d.x.shape());
  struct Float16 {  // the global policy outlives the test, however it ends
    Float16() { mixed_precision::set_global_policy("mixed_float16"); }
    ~Float16() { mixed_precision::set_global_policy("float32"); }
  } policy;
  struct Run {
    std::vector<Tensor> weights;
    History history;
    double scale = 0;
    std::int64_t skipped = 0, iterations = 0;
    std::string reason;
  };
  const auto run = [&](JitCompile mode, const std::string& devices) {
    MirroredStrategy strategy({.devices = {devices}});
    auto scope = strategy.scope();
    set_random_seed(7);
    auto m = std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(32, "relu", 12), layers::Dense(4, "softmax")});
    m->compile(optimizers::LossScale(optimizers::Adam(1e-2), {.dynamic_growth_steps = 3}),
               losses::SparseCategoricalCrossentropy(), {"accuracy"});
    m->set_jit_compile(mode);
    auto& lso = dynamic_cast<optimizers::LossScaleOptimizer&>(*m->optimizer());
    const auto restore =
        std::make_shared<LambdaCallback>(LambdaCallbackOptions{.on_epoch_end = [&](int epoch, const Logs&) {
          if (epoch == 0) lso.set_state(1024, 0, 0);
        }});
    Run out;
    out.history = m->fit(
        x, d.y, {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0, .callbacks = {restore}});
    out.reason = m->jit_compile_reason();
    out.scale = lso.loss_scale();
    out.skipped = lso.skipped_steps();
    out.iterations = lso.iterations();
    for (const auto& v : m->variables())
      out.weights.push_back(Tensor::from_vector(v.read_value().to_vector<float>(), v.shape()));
    return out;
  };
  for (const std::string devices : {"gpu:0", "gpu:0x2"}) {
    SCOPED_TRACE(devices);
    const Run on = run(JitCompile::kAuto, devices);
    const Run off = run(JitCompile::kOff, devices);
    if (step_capture_refusal(Device::parse("gpu:0")).empty()) {
      EXPECT_EQ(on.reason, "");  // captured
    }
    EXPECT_FALSE(has(on.reason, "loss scale")) << on.reason;
    EXPECT_EQ(off.skipped, 1);  // the seventh batch of the second epoch (the first's was reset)
    EXPECT_EQ(off.iterations, 18);
    // Growth every 3 finite steps, halved by the seventh batch's skip; the second epoch from 1024.
    EXPECT_EQ(off.history.history.at("loss_scale"),
              (std::vector<double>{32768.0 * 4 / 2 * 2, 1024.0 * 4 / 2 * 2}));
    EXPECT_EQ(off.history.history.at("skipped_steps"), (std::vector<double>{1, 1}));
    EXPECT_EQ(off.scale, 4096);
    EXPECT_EQ(on.scale, off.scale);
    EXPECT_EQ(on.skipped, off.skipped);
    EXPECT_EQ(on.iterations, off.iterations);
    EXPECT_EQ(on.history.history.at("loss_scale"), off.history.history.at("loss_scale"));
    EXPECT_EQ(on.history.history.at("skipped_steps"), off.history.history.at("skipped_steps"));
    ASSERT_EQ(on.weights.size(), off.weights.size());
    for (std::size_t i = 0; i < on.weights.size(); ++i)
      EXPECT_TRUE(on.weights[i].bitwise_equal(off.weights[i])) << i;
  }
}
