// Mixed precision: Keras' dtype policies (variables float32, layers computing in 16 bits, the
// final softmax and the loss in float32) and dynamic loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/training/checkpointing.hpp"
#include "training/training_test_util.hpp"

namespace lockstep {
namespace {

// Restores the float32 policy however a test ends: the global policy outlives a test.
struct PolicyGuard {
  explicit PolicyGuard(const std::string& name) { mixed_precision::set_global_policy(name); }
  ~PolicyGuard() { mixed_precision::set_global_policy("float32"); }
};

TEST(Policy, NamesAndDtypes) {
  EXPECT_EQ(mixed_precision::Policy("float32").compute_dtype(), DType::kF32);
  EXPECT_EQ(mixed_precision::Policy("mixed_float16").compute_dtype(), DType::kF16);
  EXPECT_EQ(mixed_precision::Policy("mixed_bfloat16").compute_dtype(), DType::kBF16);
  EXPECT_EQ(mixed_precision::Policy("mixed_bfloat16").variable_dtype(), DType::kF32);
  const std::string msg = test::message_of([] { mixed_precision::Policy("mixed_int8"); });
  EXPECT_NE(msg.find("'mixed_int8'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mixed_bfloat16"), std::string::npos) << msg;
}

TEST(Policy, LayersTakeTheGlobalPolicyWhenMadeOrTheirOwn) {
  PolicyGuard guard("mixed_bfloat16");
  auto hidden = layers::Dense(8, "relu", 4);
  auto out = layers::Dense({.units = 3, .activation = "softmax", .dtype = "float32"});
  EXPECT_EQ(hidden->compute_dtype(), DType::kBF16);
  EXPECT_EQ(out->compute_dtype(), DType::kF32);
  mixed_precision::set_global_policy("float32");
  EXPECT_EQ(hidden->compute_dtype(), DType::kBF16) << "the policy is the one the layer was made with";
  EXPECT_EQ(layers::Dense(2)->compute_dtype(), DType::kF32);
}

// The same weights computed in float32 and under a mixed policy: outputs and float32
// gradients agree to the 16-bit type's precision.
void expect_mixed_close_to_float32(const std::string& policy, double tol) {
  const test::Toy toy = test::make_toy(64);
  auto make = [] {
    set_random_seed(5);
    auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Dense(16, "relu", 2), layers::Dropout(0.1), layers::Dense(2, "softmax")});
    m->compile(optimizers::SGD(0.1), losses::SparseCategoricalCrossentropy());
    m->build(Shape{-1, 2});
    return m;
  };
  auto reference = make();
  std::unique_ptr<Sequential> mixed;
  {
    PolicyGuard guard(policy);
    mixed = make();
  }
  const layers::CallContext ctx{.training = true, .seed = 1};
  auto grads = [&](Sequential& m, Model::Output* out) {
    GradientTape tape;
    *out = m.forward(toy.x, ctx);
    const Tensor loss = mean(m.loss()->per_example(toy.y, out->output, out->logits));
    return tape.gradient(loss, m.trainable_variables());
  };
  Model::Output ref_out, mixed_out;
  const auto ref_grads = grads(*reference, &ref_out);
  const auto mixed_grads = grads(*mixed, &mixed_out);
  EXPECT_EQ(mixed_out.output.dtype(), DType::kF32) << "the final softmax is float32";
  EXPECT_EQ(mixed_out.logits.dtype(), DType::kF32) << "the loss sees float32 logits";
  const auto a = ref_out.output.to_vector<float>(), b = mixed_out.output.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << policy << " output " << i;
  for (std::size_t v = 0; v < ref_grads.size(); ++v) {
    EXPECT_EQ(mixed_grads[v].dtype(), DType::kF32) << "gradients reach the float32 variables as float32";
    EXPECT_EQ(mixed->trainable_variables()[v].value().dtype(), DType::kF32);
    const auto ga = ref_grads[v].to_vector<float>(), gb = mixed_grads[v].to_vector<float>();
    double scale = 1e-6;
    for (float g : ga) scale = std::max(scale, static_cast<double>(std::abs(g)));
    for (std::size_t i = 0; i < ga.size(); ++i)
      ASSERT_NEAR(ga[i], gb[i], tol * scale) << policy << " gradient of variable " << v << ", element " << i;
  }
}

TEST(Policy, MixedBfloat16ComputesWhatFloat32DoesToBfloat16Precision) {
  expect_mixed_close_to_float32("mixed_bfloat16", 3e-2);
}
TEST(Policy, MixedFloat16ComputesWhatFloat32DoesToFloat16Precision) {
  expect_mixed_close_to_float32("mixed_float16", 4e-3);
}

// A model that scales its own pixels (Rescaling first) is given them as uint8 (Model::input_of);
// under a 16-bit policy Rescaling casts them to the compute dtype and scales there, as Keras
// does. Its outputs must equal, bit for bit, those of the same weights without Rescaling on
// pixels scaled to float32 beforehand (the first layer then casts them), under every policy.
TEST(Policy, PixelsRescaledByTheModelGiveWhatPixelsScaledBeforehandDo) {
  std::vector<std::uint8_t> pixels(6 * 20);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  const Tensor raw = Tensor::from_vector(pixels, Shape{6, 20});
  const Tensor scaled = flatten_and_scale_images(raw);
  for (const char* policy : {"float32", "mixed_bfloat16", "mixed_float16"}) {
    PolicyGuard guard(policy);
    Sequential with({layers::Input(Shape{20}), layers::Rescaling(1.0f / 255.0f), layers::Dense(7, "relu"),
                     layers::Dense(3, "softmax")});
    Sequential without({layers::Input(Shape{20}), layers::Dense(7, "relu"), layers::Dense(3, "softmax")});
    with.build(Shape{-1, 20});
    without.build(Shape{-1, 20});
    const auto from = with.variables(), to = without.variables();
    ASSERT_EQ(from.size(), to.size());
    for (std::size_t i = 0; i < from.size(); ++i) to[i].assign(from[i].value());
    EXPECT_EQ(with.predict(raw).to_vector<float>(), without.predict(scaled).to_vector<float>()) << policy;
  }
}

TEST(Policy, HiddenActivationsAreSixteenBit) {
  PolicyGuard guard("mixed_bfloat16");
  auto dense = layers::Dense(4, "relu", 3);
  dense->build(Shape{-1, 3}, 1);
  const Tensor y = dense->call(Tensor::ones({2, 3}), {});
  EXPECT_EQ(y.dtype(), DType::kBF16);
  EXPECT_EQ(dense->variables()[0].value().dtype(), DType::kF32);
}

// One Dense(1) unit, weight 1, batch 4096 of x = 1 with targets 1 + 2e-5: d loss / d output is
// 2 * 2e-5 / 4096 ~ 1e-8 per example, below float16's smallest subnormal (6e-8), so it is 0 in
// float16 and nothing trains; scaled by 2^15 it is a normal float16.
double weight_after_one_step(bool auto_scale_loss) {
  PolicyGuard guard("mixed_float16");
  set_random_seed(1);
  Sequential model({layers::Dense({.units = 1, .use_bias = false, .kernel_initializer = "ones", .input_dim = 1})});
  model.compile(optimizers::SGD(0.5), losses::MeanSquaredError(), {}, auto_scale_loss);
  EXPECT_EQ(dynamic_cast<optimizers::LossScaleOptimizer*>(model.optimizer().get()) != nullptr, auto_scale_loss);
  const Tensor x = Tensor::ones({4096, 1});
  const Tensor y = Tensor::full({4096, 1}, 1.00002f);
  model.train_step(x, y);
  return model.variables()[0].value().to_vector<float>()[0];
}

TEST(LossScale, Float16GradientsThatUnderflowTrainOnlyWithLossScaling) {
  EXPECT_EQ(weight_after_one_step(false), 1.0) << "without loss scaling the gradient underflows to 0";
  const double w = weight_after_one_step(true);
  // SGD: w += 0.5 * 2 * 2e-5 = 2e-5 (to float16 precision of the scaled gradient).
  EXPECT_NEAR(w - 1.0, 2e-5, 2e-6) << "with loss scaling it trains";
}

TEST(LossScale, BacksOffOnAnInfiniteGradientAndRegrows) {
  set_random_seed(1);
  Sequential model({layers::Dense({.units = 1, .kernel_initializer = "ones", .input_dim = 2})});
  model.compile(optimizers::LossScale(optimizers::SGD(0.1), {.initial_scale = 1024, .dynamic_growth_steps = 2}),
                losses::MeanSquaredError());
  auto& ls = dynamic_cast<optimizers::LossScaleOptimizer&>(*model.optimizer());
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const Tensor y = Tensor::from_vector(std::vector<float>{1, 2}, {2, 1});
  const Tensor bad = Tensor::from_vector(std::vector<float>{1, std::numeric_limits<float>::infinity(), 3, 4}, {2, 2});
  model.train_step(x, y);
  EXPECT_EQ(ls.loss_scale(), 1024);
  EXPECT_EQ(model.optimizer()->iterations(), 1);
  const auto before = model.variables()[0].value().to_vector<float>();
  model.train_step(bad, y);
  EXPECT_EQ(ls.loss_scale(), 512) << "halved on the infinite gradient";
  EXPECT_EQ(ls.skipped_steps(), 1);
  EXPECT_EQ(model.optimizer()->iterations(), 1) << "the skipped step is no update";
  EXPECT_EQ(model.variables()[0].value().to_vector<float>(), before) << "the weights are untouched";
  model.train_step(x, y);
  EXPECT_EQ(ls.loss_scale(), 512);
  model.train_step(x, y);
  EXPECT_EQ(ls.loss_scale(), 1024) << "doubled after dynamic_growth_steps finite steps";
  EXPECT_EQ(model.optimizer()->iterations(), 3);
}

// apply_gradients takes the update's one route, as Keras' LossScaleOptimizer.apply_gradients:
// the gradients are unscaled before the inner rule, and a step with an infinite one is skipped
// (no update, not counted). The scale itself is the caller's to update (update_scale).
TEST(LossScale, ApplyGradientsUnscalesAndSkipsANonFiniteStep) {
  auto opt = optimizers::LossScale(optimizers::SGD(1.0), {.initial_scale = 4});
  Variable w(Tensor::from_vector(std::vector<float>{1, 2}, {2}), "w");
  opt->apply_gradients({Tensor::from_vector(std::vector<float>{4, -8}, {2})}, {w});
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{0, 4})) << "w -= 1.0 * g / 4";
  EXPECT_EQ(opt->iterations(), 1);
  const float inf = std::numeric_limits<float>::infinity();
  opt->apply_gradients({Tensor::from_vector(std::vector<float>{inf, 1}, {2})}, {w});
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{0, 4})) << "skipped: untouched";
  EXPECT_EQ(opt->iterations(), 1) << "a skipped step is no update";
}

// Keras 3's LossScaleOptimizer forwards learning_rate to its inner optimizer: the two have one
// rate. A rate set on the inner optimizer (a callback holding it) is the rate of the wrapper's next
// step (it was not: the wrapper kept a copy of the rate it was made with), and one set on the
// wrapper is the inner optimizer's. Scale 1 and SGD on a gradient of one: w moves by the rate.
TEST(LossScale, TheInnerOptimizersRateIsTheWrappersRate) {
  auto inner = optimizers::SGD(1.0);
  auto opt = optimizers::LossScale(inner, {.initial_scale = 1});
  Variable w(Tensor::zeros({1}), "w");
  const Tensor one = Tensor::from_vector(std::vector<float>{1}, {1});
  opt->apply_gradients({one}, {w});
  EXPECT_EQ(w.value().to_vector<float>()[0], -1.0f);
  inner->set_learning_rate(0.5);
  EXPECT_EQ(opt->current_learning_rate(), 0.5);
  opt->apply_gradients({one}, {w});
  EXPECT_EQ(w.value().to_vector<float>()[0], -1.5f) << "the step took the inner optimizer's new rate";
  opt->set_learning_rate(0.25);
  EXPECT_EQ(inner->current_learning_rate(), 0.25);
  opt->apply_gradients({one}, {w});
  EXPECT_EQ(w.value().to_vector<float>()[0], -1.75f);
  auto scheduled = optimizers::LossScale(optimizers::get("sgd", optimizers::schedules::ExponentialDecay(1, 1, 0.5)));
  EXPECT_THROW(scheduled->set_learning_rate(0.1), TypeError) << "the inner optimizer's schedule";
}

TEST(LossScale, SkippedStepsAndTheScaleAreInTheEpochLogsUnderMirroredStrategy) {
  distribute::MirroredStrategy strategy({.num_cpu_devices = 3});
  auto scope = strategy.scope();
  set_random_seed(1);
  Sequential model({layers::Dense({.units = 1, .kernel_initializer = "ones", .input_dim = 2})});
  model.compile(optimizers::LossScale(optimizers::SGD(0.01), {.initial_scale = 8, .dynamic_growth_steps = 100}),
                losses::MeanSquaredError());
  // 4 batches of 3 rows; the third has an infinite input on one replica's row only.
  std::vector<float> xs(24, 0.5f);
  xs[2 * 7] = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector(xs, {12, 2});
  const Tensor y = Tensor::full({12, 1}, 1.0f);
  const History h = model.fit(x, y, {.epochs = 1, .batch_size = 3, .shuffle = false, .verbose = 0});
  ASSERT_EQ(h.history.count("skipped_steps"), 1u);
  EXPECT_EQ(h.history.at("skipped_steps")[0], 1);
  EXPECT_EQ(h.history.at("loss_scale")[0], 4);
  EXPECT_EQ(model.optimizer()->iterations(), 3);
  strategy.check_mirrored(model.variables());  // every replica skipped the same step
}

TEST(LossScale, TheScaleAndItsCountersResumeFromACheckpoint) {
  const auto dir = std::filesystem::path(LOCKSTEP_BINARY_DIR) / "test_tmp" / "mixed_precision";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto make = [] {
    set_random_seed(1);
    auto m = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{layers::Dense(2, "linear", 3)});
    m->compile(optimizers::LossScale(optimizers::Adam(1e-3)), losses::MeanSquaredError());
    m->build(Shape{-1, 3});
    return m;
  };
  auto saved = make();
  dynamic_cast<optimizers::LossScaleOptimizer&>(*saved->optimizer()).set_state(64, 17, 3);
  save_checkpoint((dir / "ckpt").string(), *saved, make_training_state(*saved, 0, 0));
  auto restored = make();
  load_checkpoint((dir / "ckpt").string(), *restored);
  const auto& ls = dynamic_cast<const optimizers::LossScaleOptimizer&>(*restored->optimizer());
  EXPECT_EQ(ls.loss_scale(), 64);
  EXPECT_EQ(ls.step_counter(), 17);
  EXPECT_EQ(ls.skipped_steps(), 3);
}

TEST(LossScale, BadOptionsAreValueErrors) {
  EXPECT_THROW(optimizers::LossScale(nullptr), ValueError);
  EXPECT_THROW(optimizers::LossScale(optimizers::SGD(0.1), {.initial_scale = 0.5}), ValueError);
  EXPECT_THROW(optimizers::LossScale(optimizers::SGD(0.1), {.dynamic_growth_steps = 0}), ValueError);
  EXPECT_THROW(optimizers::LossScale(optimizers::LossScale(optimizers::SGD(0.1))), ValueError);
}

}  // namespace
}  // namespace lockstep
