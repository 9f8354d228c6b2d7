// jit_compile (Keras 3's compile argument): its spellings, the check over the first train step
// that names each op a replay cannot repeat, "auto" falling back to eager steps with that reason
// (the same bits as off), true refusing by name, and the .keras compile config keeping it;
// evaluate's and predict's steps checked alike.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lockstep/io/atomic_file.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/initializers.hpp"
#include "lockstep/io/zip_archive.hpp"
#include "lockstep/training/saved_model.hpp"
#include "common/error_message.hpp"
#include "training/model_io_test_util.hpp"

namespace lockstep {
namespace {
using test::inputs;
using test::labels;

#define EXPECT_HAS(message, needle) \
  EXPECT_NE((message).find(needle), std::string::npos) << "message: " << (message) << "\nmissing: " << (needle)

std::unique_ptr<Sequential> mlp(optimizers::OptimizerPtr optimizer, losses::LossPtr loss) {
  set_random_seed(7);  // the same weights for every model made here
  auto m = std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(8, "relu", 4), layers::Dense(2, "softmax")}, "mlp");
  m->compile(std::move(optimizer), std::move(loss));
  return m;
}
std::unique_ptr<Sequential> classifier() {
  return mlp(optimizers::Adam(1e-2), losses::SparseCategoricalCrossentropy());
}

TEST(JitCompile, SpellingsAndABadValueIsNamed) {
  EXPECT_EQ(parse_jit_compile("auto"), JitCompile::kAuto);
  EXPECT_EQ(parse_jit_compile("on"), JitCompile::kOn);
  EXPECT_EQ(parse_jit_compile("true"), JitCompile::kOn);
  EXPECT_EQ(parse_jit_compile("off"), JitCompile::kOff);
  EXPECT_EQ(parse_jit_compile("false"), JitCompile::kOff);
  EXPECT_HAS(test::message_of([] { parse_jit_compile("xla"); }), "jit_compile must be \"auto\", true or false");
  EXPECT_HAS(test::message_of([] { parse_jit_compile("xla"); }), "'xla'");
  EXPECT_EQ(classifier()->jit_compile(), JitCompile::kAuto);  // Keras' default
}

TEST(JitCompile, AutoOnTheCpuRunsEagerlySilentlyWithTheSameBitsAndSaysWhy) {
  auto a = classifier(), b = classifier();
  b->set_jit_compile(JitCompile::kOff);
  EXPECT_EQ(a->jit_compile_reason(), "");  // nothing checked yet
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    a->train_step(inputs(8, 4), labels(8, 2));
    b->train_step(inputs(8, 4), labels(8, 2));
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // the CPU never captures: nothing to say
  test::expect_same_variables(*a, *b);
  const std::string why = a->jit_compile_reason();
  EXPECT_HAS(why, "the CPU runs each kernel on the host");
  // The ops of this step a replay could not repeat, each named with its kernel.
  EXPECT_HAS(why, "(kernel first_outside) returns its result to the host");  // the labels' range check
  // The update reads the step's learning rate and bias corrections on the device: it replays.
  EXPECT_EQ(why.find("adam_update"), std::string::npos) << why;
  EXPECT_EQ(b->jit_compile_reason(), "");  // off: no check
}

TEST(JitCompile, ClippingByNormReadsNothingOnTheHost) {
  optimizers::SGDOptions o;
  o.learning_rate = 0.1;
  o.clipnorm = 1.0;
  o.global_clipnorm = 2.0;
  auto m = mlp(optimizers::SGD(o), losses::MeanSquaredError());
  m->train_step(inputs(8, 4), Tensor::zeros(Shape{8, 2}));
  const std::string why = m->jit_compile_reason();
  EXPECT_HAS(why, "the CPU runs each kernel on the host");  // the only reason: the device's
  EXPECT_EQ(why.find("(kernel "), std::string::npos) << why;  // no op named by its kernel: the norms stay put
  EXPECT_EQ(why.find("clip"), std::string::npos) << why;
}

TEST(JitCompile, TrueOnADeviceThatCannotCaptureIsRefusedBeforeTheStep) {
  auto m = classifier(), fresh = classifier();
  m->set_jit_compile(parse_jit_compile("true"));
  const std::string e = test::message_of([&] { m->train_step(inputs(8, 4), labels(8, 2)); });
  EXPECT_HAS(e, "jit_compile=True: train steps on cpu:0 cannot be captured into a graph");
  EXPECT_HAS(e, "the CPU runs each kernel on the host");
  EXPECT_HAS(e, "jit_compile=\"auto\" or False");
  EXPECT_EQ(m->optimizer()->iterations(), 0);
  test::expect_same_variables(*m, *fresh);  // nothing trained
  // Back to auto: the next step trains.
  m->set_jit_compile(JitCompile::kAuto);
  m->train_step(inputs(8, 4), labels(8, 2));
  EXPECT_EQ(m->optimizer()->iterations(), 1);
}

// evaluate's and predict's steps are checked as fit's are, each on its own first step: on the CPU
// "auto" runs them eagerly, silently, with the bits of off and the CPU's reason; true refuses
// them before any step, naming the step.
TEST(JitCompile, EvaluateAndPredictOnTheCpuRunEagerlyUnderAutoAndAreRefusedUnderTrue) {
  auto a = classifier(), b = classifier();
  b->set_jit_compile(JitCompile::kOff);
  const Tensor x = inputs(20, 4), y = labels(20, 2);
  EXPECT_EQ(a->jit_compile_reason_for(StepFunction::kTest), "");  // nothing checked yet
  ::testing::internal::CaptureStderr();
  const Logs logs = a->evaluate(x, y, {.batch_size = 8});
  const Tensor predicted = a->predict(x, {.batch_size = 8});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(logs, b->evaluate(x, y, {.batch_size = 8}));
  EXPECT_TRUE(predicted.bitwise_equal(b->predict(x, {.batch_size = 8})));
  EXPECT_HAS(a->jit_compile_reason_for(StepFunction::kTest), "the CPU runs each kernel on the host");
  EXPECT_HAS(a->jit_compile_reason_for(StepFunction::kPredict), "the CPU runs each kernel on the host");
  EXPECT_EQ(a->jit_compile_reason(), "");  // no train step yet: each step function is checked on its own
  EXPECT_EQ(b->jit_compile_reason_for(StepFunction::kTest), "");  // off: no check
  a->set_jit_compile(JitCompile::kOn);
  EXPECT_EQ(a->jit_compile_reason_for(StepFunction::kTest), "");  // forgotten: checked again
  EXPECT_HAS(test::message_of([&] { a->evaluate(x, y); }),
             "jit_compile=True: test steps on cpu:0 cannot be captured into a graph: the CPU runs each kernel");
  EXPECT_HAS(test::message_of([&] { a->predict(x); }),
             "jit_compile=True: predict steps on cpu:0 cannot be captured into a graph");
}

TEST(JitCompile, KerasCompileConfigKeepsIt) {
  const std::string dir = test::fresh_test_dir("jit_compile", "keras");
  std::filesystem::create_directories(dir);
  const auto config_of = [&](const std::string& path) {
    return nlohmann::json::parse(io::find_entry(io::decode_zip(io::read_file(path), "m"), "config.json")->bytes);
  };
  for (const JitCompile mode : {JitCompile::kAuto, JitCompile::kOn, JitCompile::kOff}) {
    auto m = classifier();
    m->set_jit_compile(JitCompile::kOff);
    m->train_step(inputs(8, 4), labels(8, 2));
    m->set_jit_compile(mode);
    const std::string path = dir + "/" + jit_compile_name(mode) + ".keras";
    save_model(*m, path);
    const nlohmann::json written = config_of(path)["compile_config"]["jit_compile"];
    // As Keras writes it: "auto", true or false.
    EXPECT_EQ(written, mode == JitCompile::kAuto ? nlohmann::json("auto") : nlohmann::json(mode == JitCompile::kOn));
    ::testing::internal::CaptureStderr();
    auto loaded = load_model(path);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    ASSERT_TRUE(loaded->compiled());
    EXPECT_EQ(loaded->jit_compile(), mode);
  }
  // A value Keras never writes: the model loads uncompiled, with a warning naming it.
  auto entries = io::decode_zip(io::read_file(dir + "/auto.keras"), "m");
  nlohmann::json config = config_of(dir + "/auto.keras");
  config["compile_config"]["jit_compile"] = "xla";
  for (auto& e : entries)
    if (e.name == "config.json") e.bytes = config.dump();
  io::write_file_atomic(dir + "/xla.keras", io::encode_zip(entries));
  ::testing::internal::CaptureStderr();
  auto loaded = load_model(dir + "/xla.keras");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(loaded->compiled());
  EXPECT_HAS(err, "compile argument jit_compile=\"xla\" is not supported");
}

}  // namespace
}  // namespace lockstep
