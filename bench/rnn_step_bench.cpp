// Recurrent layers' training step in C++, without Python: bench/rnn_fit.py's model
// (Embedding(10000, 64) -> LSTM(64) or GRU(64) -> Dense(1, sigmoid), Adam(1e-3), binary
// cross-entropy) trained with Model::train_step on one batch of random tokens, for A/B runs of two
// builds (bench/ab_builds.sh or a loop of your own): a round's rate leaves out its first steps.
//
//   rnn_step_bench [--layer lstm|gru|rnn] [--batch B] [--length T] [--steps N] [--rounds K]
//                  [--mask 0|1] [--sequences 0|1] [--policy NAME]
//     defaults: lstm, batch 64, 100 steps of time, 30 timed steps a round, 5 rounds, no mask
//     (--mask 1: Embedding(mask_zero=True), a quarter of each sequence padding at its end),
//     the last step's output (--sequences 1: return_sequences, then GlobalAveragePooling1D),
//     float32 (--policy mixed_float16 or mixed_bfloat16: Keras' mixed precision)
// Prints each round's steps/s and the process' CPU milliseconds a step (on a loaded machine the
// steadier figure: with one compute thread, LOCKSTEP_CPU_THREADS=1, it is the step's work and not
// its waits), then their medians, and a hash of the predictions' bits before
// and after the timed steps (equal hashes: the same forward values, the same training).
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <lockstep/lockstep.hpp>

#include "median.hpp"

using namespace lockstep;

namespace {

// FNV-1a of the predictions' float bits.
std::uint64_t bits_hash(const Tensor& t) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const float v : t.to(DType::kF32).to_vector<float>()) {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    h = (h ^ u) * 1099511628211ULL;
  }
  return h;
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

int usage() {
  std::fprintf(stderr,
               "usage: rnn_step_bench [--layer lstm|gru|rnn] [--batch B] [--length T] [--steps N] [--rounds K] "
               "[--mask 0|1] [--sequences 0|1] [--policy NAME]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string layer = "lstm", policy = "float32";
  std::int64_t batch = 64, length = 100;
  int steps = 30, rounds = 5;
  bool mask = false, sequences = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string value = argv[i + 1];
    const long long v = std::atoll(value.c_str());
    if (flag == "--layer") layer = value;
    else if (flag == "--batch") batch = v;
    else if (flag == "--length") length = v;
    else if (flag == "--steps") steps = static_cast<int>(v);
    else if (flag == "--rounds") rounds = static_cast<int>(v);
    else if (flag == "--mask") mask = v != 0;
    else if (flag == "--sequences") sequences = v != 0;
    else if (flag == "--policy") policy = value;
    else return usage();
  }
  if ((layer != "lstm" && layer != "gru" && layer != "rnn") || batch < 1 || length < 1 || steps < 1 || rounds < 1)
    return usage();

  set_random_seed(1);
  mixed_precision::set_global_policy(policy);
  constexpr std::int64_t kVocab = 10000, kEmbed = 64, kUnits = 64;
  Sequential model;
  model.add(layers::Input(Shape{length}));
  model.add(layers::Embedding(kVocab, kEmbed, mask));
  const layers::RecurrentOptions options{.units = kUnits, .return_sequences = sequences};
  model.add(layer == "lstm" ? layers::LSTM(options) : layer == "gru" ? layers::GRU(options) : layers::SimpleRNN(options));
  if (sequences) model.add(layers::GlobalAveragePooling1D());
  model.add(layers::Dense(1, "sigmoid"));
  model.compile(optimizers::Adam(1e-3), losses::BinaryCrossentropy());

  std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch * length));
  std::vector<float> labels(static_cast<std::size_t>(batch));
  std::uint64_t state = 12345;
  const auto next = [&state] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < length; ++t) {
      const bool padding = mask && t >= length - length / 4;
      tokens[static_cast<std::size_t>(b * length + t)] = padding ? 0 : static_cast<std::int32_t>(1 + next() % (kVocab - 1));
    }
    labels[static_cast<std::size_t>(b)] = static_cast<float>(next() % 2);
  }
  const Tensor x = Tensor::from_vector(tokens, Shape{batch, length});
  const Tensor y = Tensor::from_vector(labels, Shape{batch, 1});

  const std::uint64_t before = bits_hash(model.predict(x));
  for (int i = 0; i < 3; ++i) model.train_step(x, y);  // warm-up: the allocator's caches, the constants
  std::vector<double> rates, cpu_ms;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    double loss = 0;
    for (int i = 0; i < steps; ++i) loss = model.train_step(x, y);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(steps / s);
    cpu_ms.push_back(1e3 * (cpu_seconds() - cpu_start) / steps);
    std::printf("round %d: %.2f steps/s, %.2f CPU ms a step (loss %.4f)\n", r + 1, rates.back(), cpu_ms.back(), loss);
  }
  std::printf("median: %.2f steps/s, %.2f CPU ms a step\n", median(rates), median(cpu_ms));
  std::printf("predictions' hash: %016llx before, %016llx after\n", static_cast<unsigned long long>(before),
              static_cast<unsigned long long>(bits_hash(model.predict(x))));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "rnn_step_bench: %s\n", e.what());
  return 1;
}
