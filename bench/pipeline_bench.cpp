// Input pipeline benchmark (plain main; figures are wall-clock and machine-dependent).
//  (a) a map costing ~2 ms of CPU per element over 200 elements: num_parallel_calls = 1 against
//      kAutotune. Goal on a 2-core machine: a speed-up of at least 1.8x.
//  (b) prefetch overlap: the input pipeline alone (time per batch), a compute step alone (a
//      busy loop), and both pipelined; the ratio of combined to max(input, compute) should be
//      within 10% of 1. The bench reserves one core for "compute" in the ThreadBudget, as a
//      training loop will, so the input side gets the rest.
// --sleep replaces every busy loop by a sleep of the same length: it checks the pipelining
// itself (threads, buffers, autotune) on a machine whose cores are busy with other work.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <lockstep/lockstep.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using lockstep::data::Dataset;
using lockstep::data::Element;

volatile std::uint64_t g_sink = 0;
bool g_sleep = false;
constexpr std::uint64_t kSleepUnit = 1000000;  // "iterations" per ms in --sleep mode

// A fixed amount of arithmetic: CPU time, not wall time, so that an oversubscribed core shows.
void spin(std::uint64_t iterations) {
  if (g_sleep) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(iterations / (kSleepUnit / 1000000)));
    return;
  }
  std::uint64_t x = 88172645463325252ull;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  g_sink = g_sink + x;
}

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Iterations that take about `ms` milliseconds on this machine.
std::uint64_t calibrate(double ms) {
  if (g_sleep) return static_cast<std::uint64_t>(ms * kSleepUnit);
  std::uint64_t n = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    spin(n);
    const double s = seconds(t0);
    if (s > 0.05) return static_cast<std::uint64_t>(static_cast<double>(n) * (ms * 1e-3) / s);
    n *= 2;
  }
}

double drain(const Dataset& ds) {
  const auto t0 = Clock::now();
  std::int64_t n = 0;
  for (auto& e : ds) n += static_cast<std::int64_t>(e.size());
  g_sink = g_sink + static_cast<std::uint64_t>(n);
  return seconds(t0);
}

}  // namespace

int main(int argc, char** argv) try {
  using lockstep::data::kAutotune;
  g_sleep = argc > 1 && std::string(argv[1]) == "--sleep";
  std::printf("cores: %d\n", lockstep::data::ThreadBudget::process().cores());
  const std::uint64_t two_ms = calibrate(2.0);

  // (a) parallel map
  const auto busy_map = [two_ms](Element e) {
    spin(two_ms);
    return e;
  };
  const Dataset source = Dataset::range(200);
  drain(source.map(busy_map, kAutotune).take(20));  // warm the threads' allocator once
  const double sequential = drain(source.map(busy_map, 1));
  const double autotuned = drain(source.map(busy_map, kAutotune));
  std::printf("(a) map 200 x 2 ms: num_parallel_calls=1 %.1f ms, kAutotune %.1f ms, speed-up %.2fx (goal >= 1.8x)\n",
              sequential * 1e3, autotuned * 1e3, sequential / autotuned);

  // (b) prefetch overlap
  constexpr int kSteps = 100;
  const std::uint64_t input_cost = calibrate(4.0), compute_cost = calibrate(5.0);
  auto compute_lease = lockstep::data::ThreadBudget::process().reserve_compute(1);
  const Dataset input = Dataset::range(kSteps * 8)
                            .map(
                                [input_cost](Element e) {
                                  spin(input_cost / 8);
                                  return e;
                                },
                                kAutotune)
                            .batch(8);
  const double input_alone = drain(input) / kSteps;
  auto t0 = Clock::now();
  for (int i = 0; i < kSteps; ++i) spin(compute_cost);
  const double compute_alone = seconds(t0) / kSteps;
  t0 = Clock::now();
  int steps = 0;
  for (auto& batch : input.prefetch(kAutotune)) {
    (void)batch;
    spin(compute_cost);
    ++steps;
  }
  const double combined = seconds(t0) / steps;
  const double bound = std::max(input_alone, compute_alone);
  std::printf("(b) per step: input alone %.2f ms, compute alone %.2f ms, pipelined %.2f ms; "
              "pipelined / max = %.3f (goal <= 1.10)\n",
              input_alone * 1e3, compute_alone * 1e3, combined * 1e3, combined / bound);
  return 0;
} catch (const lockstep::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
