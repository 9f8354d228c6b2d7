// Keras' training= of a call on GPU replicas: a base called with training=False (Dense,
// BatchNormalization, Dropout) and a Dropout called with training=True train the same bits whether
// the train step is captured (jit_compile=True) or eager, and as on the CPU; the base's
// BatchNormalization keeps its moving statistics. CI runs them on emulated GPUs (gpu.emulated).
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
  std::vector<std::vector<float>> weights;  // every variable of the model, after fit
  std::vector<std::vector<float>> moving_before, moving_after;
};

// Input -> base(x, training=False) -> Dropout(training=True) -> Dense on `devices`, fit under `mode`.
Trained train(JitCompile mode, const std::vector<std::string>& devices) {
  const test::Classification d = test::random_classification(64, 12, 4, 3);
  MirroredStrategy strategy({.devices = devices});
  auto scope = strategy.scope();
  set_random_seed(9);
  const KerasTensor in = Input({12});
  KerasTensor h = call(layers::Dense(16, "relu"), in);
  h = call(layers::BatchNormalization(), h);
  h = call(layers::Dropout(0.3f), h);
  Functional base(in, h, "base");
  const KerasTensor x = Input({12});
  KerasTensor y = call(base, {x}, {.training = false}).front();
  y = call(layers::Dropout(0.2f), y, {.training = true});
  Functional m(x, call(layers::Dense(4, "softmax"), y), "guide");
  m.compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
  m.set_jit_compile(mode);
  const auto& bn = m.layers()[2];
  Trained t;
  t.moving_before = values_of({bn->variables()[2], bn->variables()[3]});
  ::testing::internal::CaptureStderr();
  m.fit(d.x, d.y, {.epochs = 2, .batch_size = 16, .shuffle = false, .verbose = 0});
  (void)::testing::internal::GetCapturedStderr();
  t.moving_after = values_of({bn->variables()[2], bn->variables()[3]});
  t.weights = values_of(m.variables());
  return t;
}

}  // namespace

// One GPU and two logical replicas of it, captured and eager: the same bits, the CPU's on one
// replica, and the moving statistics left alone.
TEST(GpuTrainingArg, CapturedAndEagerStepsTrainTheSameBits) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  for (const std::string& devices : {std::string("gpu:0"), std::string("gpu:0x2")}) {
    SCOPED_TRACE(devices);
    const Trained captured = train(JitCompile::kOn, {devices});
    const Trained eager = train(JitCompile::kOff, {devices});
    EXPECT_EQ(captured.moving_after, captured.moving_before);
    EXPECT_EQ(eager.moving_after, eager.moving_before);
    EXPECT_EQ(captured.weights, eager.weights);
    if (devices == "gpu:0") {
      EXPECT_EQ(train(JitCompile::kOff, {"cpu:0"}).weights, eager.weights);
    }
  }
}
