// Freezing on GPU replicas: a frozen layer (and a frozen BatchNormalization, in inference mode)
// keeps its bits through fit whether the train step is captured (jit_compile=True) or eager, the
// two train the same bits, and unfreezing then compiling again captures a step that trains the
// base. CI runs them on emulated GPUs (gpu.emulated), which capture as real ones do.
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

std::vector<std::vector<float>> values_of(const std::vector<Variable>& vars) {
  std::vector<std::vector<float>> out;
  for (const auto& v : vars) out.push_back(v.read_value().to_vector<float>());
  return out;
}

struct Trained {
  std::vector<std::vector<float>> frozen_before, frozen_after, head_before, head_after;
  std::vector<std::vector<float>> base_after_unfreezing;
};

// Dense -> BatchNormalization -> Dense on `devices`, the first two frozen, fit under `mode`; then
// (unfreeze) the base unfrozen, compiled again and fit once more.
Trained train(JitCompile mode, const std::vector<std::string>& devices, bool unfreeze = false) {
  const test::Classification d = test::random_classification(64, 12, 4, 3);
  MirroredStrategy strategy({.devices = devices});
  auto scope = strategy.scope();
  set_random_seed(9);
  Sequential m({layers::Dense(16, "relu", 12), layers::BatchNormalization(), layers::Dense(4, "softmax")});
  m.build(Shape{-1, 12});
  m.layers()[0]->set_trainable(false);
  m.layers()[1]->set_trainable(false);
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
  m.set_jit_compile(mode);
  std::vector<Variable> frozen = m.layers()[0]->variables();
  for (const auto& v : m.layers()[1]->variables()) frozen.push_back(v);
  Trained t;
  t.frozen_before = values_of(frozen);
  t.head_before = values_of(m.layers()[2]->variables());
  const FitOptions fit{.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0};
  ::testing::internal::CaptureStderr();
  m.fit(d.x, d.y, fit);
  if (unfreeze) {
    m.set_trainable(true);
    m.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy());
    m.set_jit_compile(mode);
    m.fit(d.x, d.y, fit);
  }
  (void)::testing::internal::GetCapturedStderr();
  t.frozen_after = values_of(frozen);
  t.head_after = values_of(m.layers()[2]->variables());
  if (unfreeze) t.base_after_unfreezing = values_of(m.layers()[0]->variables());
  return t;
}

}  // namespace

// One GPU, and two logical replicas of it (captured together), captured and eager: the frozen
// weights keep their bits, the head trains, and the captured step trains the eager step's bits
// (and the CPU's, on one replica). Two GPUs (whose collectives are not captured): eagerly, the same.
TEST(GpuFreeze, FrozenLayersKeepTheirBitsCapturedOrNotAndBothTrainTheSameBits) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  for (const std::string& devices : {std::string("gpu:0"), std::string("gpu:0x2")}) {
    SCOPED_TRACE(devices);
    const Trained captured = train(JitCompile::kOn, {devices});  // throws, naming why, where it cannot capture
    const Trained eager = train(JitCompile::kOff, {devices});
    EXPECT_EQ(captured.frozen_after, captured.frozen_before);
    EXPECT_EQ(eager.frozen_after, eager.frozen_before);
    EXPECT_NE(captured.head_after, captured.head_before);
    EXPECT_EQ(captured.head_after, eager.head_after);
    if (devices == "gpu:0") {
      const Trained cpu = train(JitCompile::kOff, {"cpu:0"});
      EXPECT_EQ(cpu.head_after, eager.head_after);
    }
  }
  if (gpus() >= 2) {
    const Trained two = train(JitCompile::kAuto, {"gpu:0", "gpu:1"});
    EXPECT_EQ(two.frozen_after, two.frozen_before);
    EXPECT_EQ(two.head_after, train(JitCompile::kOff, {"gpu:0x2"}).head_after);
  }
}

// Unfrozen and compiled again, the step is captured anew with the base's weights among those it
// updates: the base trains, as eagerly.
TEST(GpuFreeze, UnfrozenAndCompiledAgainTheCapturedStepTrainsTheBase) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train(JitCompile::kOn, {"gpu:0"}, /*unfreeze=*/true);
  const Trained eager = train(JitCompile::kOff, {"gpu:0"}, /*unfreeze=*/true);
  ASSERT_EQ(captured.base_after_unfreezing.size(), 2u);
  EXPECT_NE(captured.base_after_unfreezing, std::vector<std::vector<float>>(captured.frozen_before.begin(),
                                                                            captured.frozen_before.begin() + 2));
  EXPECT_EQ(captured.base_after_unfreezing, eager.base_after_unfreezing);
  EXPECT_EQ(captured.head_after, eager.head_after);
}
