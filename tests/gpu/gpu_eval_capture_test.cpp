// jit_compile for evaluate and predict on a GPU (training/step_jit.hpp): after the first step is
// checked, every later step of one replica is replayed from a graph per input signature (the
// short last batch has its own), with the bits of eager steps and one device read per execution;
// a layer that reads the host keeps the steps eager, named ("auto") or refused (true); logical
// replicas of one GPU replay one graph; replicas on several GPUs run eagerly, named. CI runs them
// on emulated GPUs, which count their replays.
#include <memory>
#include <string>
#include <vector>

#include "backend/emulated_gpu.hpp"
#include "common/random_data.hpp"
#include "gpu_test_util.hpp"
#include "lockstep/tensor/host_reads.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

bool emulated() { return backend::device_kind(DeviceKind::kCuda).emulated(); }

// x divided by 1 + |x[0, 0]|, a number the host reads: a replay could not repeat that.
class HostReadScale final : public layers::Layer {
 public:
  HostReadScale() : Layer("host_read_scale") {}
  std::string class_name() const override { return "TestHostReadScale"; }
  Shape compute_output_shape(const Shape& s) const override { return s; }
  Tensor call(const Tensor& x, const layers::CallContext&) const override {
    const float first = x.slice(0, 1).to_vector<float>()[0];
    return scale(x, 1.0f / (1.0f + (first < 0 ? -first : first)));
  }
};

// A classifier (its labels checked on the host before each replay); Dropout does nothing in
// inference. With `host_read`, a layer that reads the host first.
std::unique_ptr<Sequential> classifier(JitCompile mode, bool host_read = false) {
  set_random_seed(7);  // the same weights for every model made here
  std::vector<layers::LayerPtr> ls;
  if (host_read) ls.push_back(std::make_shared<HostReadScale>());
  for (auto l : {layers::Dense(32, "relu", 12), layers::Dropout(0.25), layers::Dense(4, "softmax")}) ls.push_back(l);
  auto m = std::make_unique<Sequential>(ls, "classifier");
  m->compile(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  m->set_jit_compile(mode);
  return m;
}

// 6 batches of 16: 5 whole, the last of 5.
const test::Classification& eval_data() {
  static const test::Classification d = test::random_classification(16 * 5 + 5, 12, 4, 3);
  return d;
}

struct Outcome {
  Logs first, second;  // two evaluations: the second's every step is replayed
  Tensor predicted;
  std::string test_reason, predict_reason, err;
  std::int64_t replays = 0;        // emulated GPUs' replays over both evaluations and predict
  std::uint64_t second_reads = 0;  // the device reads of the second evaluation
};

Outcome run(JitCompile mode, std::vector<std::string> devices = {"gpu:0"}, std::int64_t steps_per_execution = 1,
            bool host_read = false) {
  MirroredStrategy strategy({.devices = std::move(devices)});
  auto scope = strategy.scope();
  auto m = classifier(mode, host_read);
  m->set_steps_per_execution(steps_per_execution);
  Outcome o;
  const std::int64_t replays = backend::emulated_replays().graphs;
  ::testing::internal::CaptureStderr();
  try {
    o.first = m->evaluate(eval_data().x, eval_data().y, {.batch_size = 16});
    const std::uint64_t reads = detail::host_reads();
    o.second = m->evaluate(eval_data().x, eval_data().y, {.batch_size = 16});
    o.second_reads = detail::host_reads() - reads;
    o.predicted = m->predict(eval_data().x, {.batch_size = 16});
  } catch (...) {
    o.err = ::testing::internal::GetCapturedStderr();  // the capture ends: the next test may open one
    throw;
  }
  o.err = ::testing::internal::GetCapturedStderr();
  o.replays = backend::emulated_replays().graphs - replays;
  o.test_reason = m->jit_compile_reason_for(StepFunction::kTest);
  o.predict_reason = m->jit_compile_reason_for(StepFunction::kPredict);
  EXPECT_EQ(m->jit_compile_reason(), "");  // no train step was run
  return o;
}

void expect_same_results(const Outcome& a, const Outcome& b) {
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_EQ(a.first, a.second);
  EXPECT_TRUE(a.predicted.bitwise_equal(b.predicted));
}

// Under "auto" on `devices`: the results of jit_compile off, nothing replayed, and `why` in the
// test and predict steps' reasons. Returns the "auto" run.
Outcome expect_eager_naming(const std::vector<std::string>& devices, bool host_read, const std::string& why) {
  const Outcome off = run(JitCompile::kOff, devices, 1, host_read);
  Outcome on = run(JitCompile::kAuto, devices, 1, host_read);
  expect_same_results(on, off);
  EXPECT_EQ(on.replays, 0);
  EXPECT_TRUE(has(on.test_reason, why)) << on.test_reason;
  EXPECT_TRUE(has(on.predict_reason, why)) << on.predict_reason;
  return on;
}

}  // namespace

// Both evaluations and predict give the bits of eager steps (jit_compile off); every step after
// the checked first one is replayed (the short last batch from a graph of its own), with one
// device read per execution, in executions of 1 and of 4 steps.
TEST(GpuEvalCapture, EvaluateAndPredictAreReplayedWithTheBitsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  const Outcome off = run(JitCompile::kOff);
  EXPECT_EQ(off.test_reason, "");
  EXPECT_EQ(off.err, "");
  for (const std::int64_t spe : {1, 4}) {
    SCOPED_TRACE("steps_per_execution " + std::to_string(spe));
    const Outcome on = run(refusal.empty() ? JitCompile::kOn : JitCompile::kAuto, {"gpu:0"}, spe);
    expect_same_results(on, off);
    EXPECT_EQ(on.second_reads, spe == 1 ? 6u : 2u);  // one per execution: the logs
    std::printf("jit_compile on gpu:0, evaluate and predict: %s\n",
                on.test_reason.empty() ? "captured" : ("eager: " + on.test_reason).c_str());
    if (!refusal.empty()) {  // this GPU cannot capture: eager, said once per step function
      EXPECT_EQ(on.test_reason, refusal);
      EXPECT_EQ(on.predict_reason, refusal);
      continue;
    }
    EXPECT_EQ(on.test_reason, "");
    EXPECT_EQ(on.predict_reason, "");
    EXPECT_EQ(on.err, "");
    // 5 of the first evaluation's 6 steps, all 6 of the second's, 5 of predict's.
    if (emulated()) {
      EXPECT_EQ(on.replays, 16);
    }
  }
  const Outcome off_spe = run(JitCompile::kOff, {"gpu:0"}, 4);
  EXPECT_EQ(off_spe.second_reads, 2u);
  EXPECT_EQ(off_spe.replays, 0);
}

// A layer that reads the host: "auto" runs evaluate's and predict's steps eagerly, saying why
// once each on the device; true refuses the test step by name after its checked step.
TEST(GpuEvalCapture, ALayerThatReadsTheHostKeepsTheStepsEagerNamingWhy) {
  LOCKSTEP_REQUIRE_GPU();
  const std::string read = "a read of a (1, 12) tensor's values on the host";
  const Outcome on = expect_eager_naming({"gpu:0"}, true, read);
  EXPECT_TRUE(has(on.err, "jit_compile=\"auto\": model 'classifier' runs its test steps eagerly on gpu:0: ")) << on.err;
  EXPECT_TRUE(has(on.err, "jit_compile=\"auto\": model 'classifier' runs its predict steps eagerly on gpu:0: "))
      << on.err;
  EXPECT_EQ(on.err.find("test steps", on.err.find("test steps") + 1), std::string::npos) << on.err;  // once
  if (!step_capture_refusal(Device::parse("gpu:0")).empty()) return;  // true is refused before any step
  const std::string msg = message_of([] { run(JitCompile::kOn, {"gpu:0"}, 1, true); });
  EXPECT_TRUE(has(msg, "jit_compile=True: model 'classifier': the test step cannot be captured into a graph: ")) << msg;
  EXPECT_TRUE(has(msg, read)) << msg;
}

// Logical replicas of one GPU capture their test and predict steps as one graph, as fit's: the
// bits of jit_compile off, each replay one launch for every lane (the short last batch, which
// leaves a replica few or no rows, a graph of its own).
TEST(GpuEvalCapture, LogicalReplicasOfOneGpuReplayTheirStepsAsOneGraph) {
  LOCKSTEP_REQUIRE_GPU();
  if (!step_capture_refusal(Device::parse("gpu:0")).empty()) GTEST_SKIP() << "this GPU cannot capture";
  for (const std::string devices : {"gpu:0x2", "gpu:0x4"}) {
    SCOPED_TRACE(devices);
    const std::int64_t lanes_before = backend::emulated_replays().lanes;
    const Outcome off = run(JitCompile::kOff, {devices});
    const Outcome on = run(JitCompile::kOn, {devices});
    expect_same_results(on, off);
    EXPECT_EQ(on.test_reason, "");
    EXPECT_EQ(on.predict_reason, "");
    EXPECT_EQ(on.second_reads, off.second_reads);
    if (emulated()) {
      EXPECT_EQ(on.replays, 16);  // as on one replica: one launch a step
      const std::int64_t lanes = devices == "gpu:0x2" ? 2 : 4;
      EXPECT_EQ(backend::emulated_replays().lanes - lanes_before, 16 * lanes);
    }
  }
}

// Replicas on two GPUs: eager, naming why; the results are those of jit_compile off.
TEST(GpuEvalCapture, ReplicasOnTwoGpusRunEagerlyNamingThem) {
  LOCKSTEP_REQUIRE_GPU();
  if (gpus() < 2) GTEST_SKIP() << "needs two GPUs (LOCKSTEP_EMULATED_GPUS=2)";
  const std::vector<std::string> two{"gpu:0", "gpu:1"};
  const std::string why = "replicas are not captured: they are on gpu:0 and gpu:1";
  const Outcome on = expect_eager_naming(two, false, why);
  EXPECT_TRUE(has(on.err, "runs its test steps eagerly on gpu:0")) << on.err;
  if (!step_capture_refusal(Device::parse("gpu:0")).empty()) return;  // true is refused before any step
  const std::string msg = message_of([&] { run(JitCompile::kOn, two); });
  EXPECT_TRUE(has(msg, "the test step cannot be captured into a graph")) << msg;
  EXPECT_TRUE(has(msg, why)) << msg;
}

// fit's validation is evaluate's step: replayed under jit_compile alongside the train step's
// replays, with the validation logs of jit_compile off.
TEST(GpuEvalCapture, FitsValidationIsReplayedWithTheLogsOfEagerSteps) {
  LOCKSTEP_REQUIRE_GPU();
  const auto fit = [](JitCompile mode, std::string* test_reason, std::int64_t* replays) {
    MirroredStrategy strategy({.devices = {"gpu:0"}});
    auto scope = strategy.scope();
    auto m = classifier(mode);
    const std::int64_t at = backend::emulated_replays().graphs;
    const data::Dataset validation = data::Dataset::from_tensor_slices(eval_data().x, eval_data().y).batch(16);
    const History h = m->fit(eval_data().x, eval_data().y,
                             {.epochs = 2, .batch_size = 16, .validation_data = validation, .shuffle = false,
                              .verbose = 0});
    *replays = backend::emulated_replays().graphs - at;
    *test_reason = m->jit_compile_reason_for(StepFunction::kTest);
    return h;
  };
  std::string on_reason, off_reason;
  std::int64_t on_replays = 0, off_replays = 0;
  const History off = fit(JitCompile::kOff, &off_reason, &off_replays);
  const History on = fit(JitCompile::kAuto, &on_reason, &on_replays);
  EXPECT_EQ(on.history.at("val_loss"), off.history.at("val_loss"));
  EXPECT_EQ(on.history.at("val_accuracy"), off.history.at("val_accuracy"));
  EXPECT_EQ(on.history.at("loss"), off.history.at("loss"));
  EXPECT_EQ(off_replays, 0);
  if (!step_capture_refusal(Device::parse("gpu:0")).empty()) return;
  EXPECT_EQ(on_reason, "");
  // Train: 11 of 12 steps; validation: 5 of the first pass's 6 steps, all 6 of the second's.
  if (emulated()) {
    EXPECT_EQ(on_replays, 11 + 11);
  }
}
