// The recurrent layers on a GPU: Embedding(mask_zero=True) -> LSTM -> GRU -> Dense trains on
// gpu:0 the CPU's weights (to 1e-4) on padded batches, the same bits in a captured step
// (jit_compile=True) as eagerly; so does an encoder-decoder (an LSTM's return_state starting a
// decoder LSTM through initial_state). CI runs it on emulated GPUs (gpu.emulated).
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "lockstep/tensor/step_capture.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

struct Trained {
  std::vector<std::vector<float>> weights;
  std::vector<double> losses;
  double eval_loss = 0;
};

// Rows of 2 .. 6 tokens padded with 0; the label: whether token 1 is among them.
Trained train_recurrent(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32, steps = 6, vocab = 6;
  std::vector<float> x(static_cast<std::size_t>(n * steps), 0.0f), y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t len = 2 + i % 5;
    for (std::int64_t t = 0; t < len; ++t)
      x[static_cast<std::size_t>(i * steps + t)] = static_cast<float>(1 + (i * 7 + t * 3) % (vocab - 1));
    y[static_cast<std::size_t>(i)] = 0.0f;
    for (std::int64_t t = 0; t < len; ++t)
      if (x[static_cast<std::size_t>(i * steps + t)] == 1.0f) y[static_cast<std::size_t>(i)] = 1.0f;
  }
  const Tensor xt = Tensor::from_vector(x, Shape{n, steps}), yt = Tensor::from_vector(y, Shape{n, 1});
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  set_random_seed(4);
  Sequential m({layers::Input({steps}), layers::Embedding(vocab, 4, true), layers::LSTM(6, true), layers::GRU(5),
                layers::Dense(1, "sigmoid")});
  m.compile(optimizers::Adam(1e-2), losses::BinaryCrossentropy(), {"accuracy"});
  m.set_jit_compile(mode);
  ::testing::internal::CaptureStderr();
  const History h = m.fit(xt, yt, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  const Logs eval = m.evaluate(xt, yt, {.batch_size = 8});
  (void)::testing::internal::GetCapturedStderr();
  Trained t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  t.eval_loss = eval.at("loss");
  return t;
}

// Keras' seq2seq: the encoder's final states start the decoder; the target, the encoder input's
// first feature's mean at every decoder step, reaches the decoder through the states alone.
Trained train_encoder_decoder(JitCompile mode, const std::string& devices) {
  constexpr std::int64_t n = 32;
  std::vector<float> enc(static_cast<std::size_t>(n * 5 * 2)), y;
  for (std::size_t i = 0; i < enc.size(); ++i) enc[i] = std::sin(0.7f * static_cast<float>(i));
  for (std::int64_t i = 0; i < n; ++i) {
    float m = 0;
    for (std::int64_t t = 0; t < 5; ++t) m += enc[static_cast<std::size_t>((i * 5 + t) * 2)] / 5.0f;
    for (int t = 0; t < 3; ++t) y.push_back(m);
  }
  MirroredStrategy strategy({.devices = {devices}});
  auto scope = strategy.scope();
  const KerasTensor enc_in = Input({5, 2}), dec_in = Input({3, 1});
  const auto encoded = call_outputs(layers::LSTM({.units = 6, .return_state = true}), enc_in);
  const std::vector<KerasTensor> states{encoded[1], encoded[2]};
  const KerasTensor decoded = call(layers::LSTM(6, true), dec_in, {.initial_state = &states});
  Functional m(std::vector<KerasTensor>{enc_in, dec_in}, call(layers::Dense(1), decoded), "seq2seq", 4);
  m.compile(optimizers::Adam(1e-2), losses::MeanSquaredError());
  m.set_jit_compile(mode);
  const std::vector<Tensor> xs{Tensor::from_vector(enc, Shape{n, 5, 2}), Tensor::zeros(Shape{n, 3, 1})};
  const std::vector<Tensor> ys{Tensor::from_vector(y, Shape{n, 3, 1})};
  ::testing::internal::CaptureStderr();
  const History h = m.fit(xs, ys, {.epochs = 2, .batch_size = 8, .shuffle = false, .verbose = 0});
  (void)::testing::internal::GetCapturedStderr();
  Trained t;
  for (const auto& var : m.variables()) t.weights.push_back(var.read_value().to_vector<float>());
  t.losses = h.history.at("loss");
  return t;
}

}  // namespace

TEST(GpuRecurrent, AnEncoderDecoderTrainsAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const Trained eager = train_encoder_decoder(JitCompile::kOff, "gpu:0");
  const Trained cpu = train_encoder_decoder(JitCompile::kOff, "cpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(eager.weights, cpu.weights));
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_encoder_decoder(JitCompile::kOn, "gpu:0");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
}

TEST(GpuRecurrent, AMaskedLstmAndGruTrainAsOnTheCpuCapturedOrNot) {
  LOCKSTEP_REQUIRE_GPU();
  const Trained eager = train_recurrent(JitCompile::kOff, "gpu:0");
  const Trained cpu = train_recurrent(JitCompile::kOff, "cpu:0");
  ASSERT_NO_FATAL_FAILURE(assert_weights_near_cpu(eager.weights, cpu.weights));
  EXPECT_NEAR(eager.eval_loss, cpu.eval_loss, 1e-5 * cpu.eval_loss);
  const std::string refusal = step_capture_refusal(Device::parse("gpu:0"));
  if (!refusal.empty()) GTEST_SKIP() << "gpu:0 cannot capture: " << refusal;
  const Trained captured = train_recurrent(JitCompile::kOn, "gpu:0");
  EXPECT_EQ(captured.weights, eager.weights);
  EXPECT_EQ(captured.losses, eager.losses);
  EXPECT_EQ(captured.eval_loss, eager.eval_loss);
}
