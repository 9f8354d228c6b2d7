// MirroredStrategy's cost: the flagship MLP's training steps per second through bare
// Model::train_step (no input pipeline, no callbacks), in one process.
//
//   strategy_overhead [STEPS [ROUNDS]]
//       global batch 128 with no strategy, with MirroredStrategy on one device (same cores) and
//       on 2 devices, interleaved rounds, best round of each; prints the ratios.
//   strategy_overhead --replicas R --batch B [--steps N] [--bucket-cap BYTES] [--no-shard-update]
//                     [--no-overlap-gradients] [--no-gradients-in-place]
//       one measurement: MirroredStrategy over R logical CPU devices at global batch B (what
//       `lockstep train --devices cpu:R --global-batch-size B` trains, LOCKSTEP_CPU_THREADS
//       applying alike), 5% warm-up steps (at least 20), then N timed steps (default 2000);
//       prints "steps_per_second X". --bucket-cap sets MirroredOptions::bucket_cap_bytes (the
//       flagship's gradients are one bucket at the default 25 MiB; with 65536, three), e.g. to
//       compare the exchange overlapped with backward and not (--no-overlap-gradients). The --no-*
//       flags turn MirroredOptions' shard_optimizer_update, overlap_gradients and
//       gradients_in_place off, for A/B comparisons (bench/compare_shard_update.sh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <lockstep/lockstep.hpp>

#include "flagship.hpp"

using namespace lockstep;

namespace {
constexpr std::int64_t kExamples = 12800;

double steps_per_second(distribute::Strategy* strategy, const Tensor& x, const Tensor& y, std::int64_t batch, int steps,
                        int warmup) {
  const std::unique_ptr<Sequential> model = make_flagship(strategy);
  const std::int64_t batches = x.dim(0) / batch;
  std::int64_t next = 0;
  auto step = [&] {
    const std::int64_t b = (next++ % batches) * batch;
    model->train_step(x.slice(b, b + batch), y.slice(b, b + batch));
  };
  for (int i = 0; i < warmup; ++i) step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  return steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int usage() {
  std::fprintf(stderr, "usage: strategy_overhead [STEPS [ROUNDS]]\n"
                       "       strategy_overhead --replicas R --batch B [--steps N] [--bucket-cap BYTES]\n"
                       "                         [--no-shard-update] [--no-overlap-gradients] [--no-gradients-in-place]\n");
  return 2;
}

// The one-measurement mode (bench/compare_scaling.sh).
int one_measurement(int argc, char** argv, const Tensor& x_all, const Tensor& y_all) {
  int replicas = 0, steps = 2000;
  std::int64_t batch = 0;
  long long cap = static_cast<long long>(distribute::GradientReducer::kDefaultBucketCapBytes);
  distribute::MirroredOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-shard-update") options.shard_optimizer_update = false;
    else if (flag == "--no-overlap-gradients") options.overlap_gradients = false;
    else if (flag == "--no-gradients-in-place") options.gradients_in_place = false;
    else if (i + 1 == argc) return usage();
    else if (flag == "--replicas") replicas = std::atoi(argv[++i]);
    else if (flag == "--batch") batch = std::atoll(argv[++i]);
    else if (flag == "--steps") steps = std::atoi(argv[++i]);
    else if (flag == "--bucket-cap") cap = std::atoll(argv[++i]);
    else return usage();
  }
  if (replicas < 1 || batch < replicas || batch > kExamples || steps < 1 || cap < 1) return usage();
  options.num_cpu_devices = replicas;
  options.bucket_cap_bytes = static_cast<std::size_t>(cap);
  distribute::MirroredStrategy strategy(options);
  if (strategy.num_replicas_in_sync() != replicas) {
    std::fprintf(stderr, "strategy_overhead: got %d replicas, asked for %d\n", strategy.num_replicas_in_sync(), replicas);
    return 1;
  }
  const std::int64_t n = kExamples / batch * batch;
  const double sps = steps_per_second(&strategy, x_all.slice(0, n), y_all.slice(0, n), batch, steps,
                                      std::max(20, steps / 20));
  std::printf("steps_per_second %.1f\n", sps);
  return 0;
}
}  // namespace

int main(int argc, char** argv) try {
  const bool single = argc > 1 && std::strncmp(argv[1], "--", 2) == 0;
  if (!single && argc > 3) return usage();
  auto [train, test] = datasets::mnist::load_data();
  const Tensor x = flatten_and_scale_images(train.x.slice(0, kExamples));
  const Tensor y = train.y.slice(0, kExamples);
  if (single) return one_measurement(argc, argv, x, y);
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (steps < 1 || rounds < 1) return usage();
  distribute::MirroredStrategy one({.num_cpu_devices = 1});
  distribute::MirroredStrategy two({.num_cpu_devices = 2});
  double best_none = 0, best_one = 0, best_two = 0;
  for (int r = 0; r < rounds; ++r) {
    best_none = std::max(best_none, steps_per_second(nullptr, x, y, 128, steps, 20));
    best_one = std::max(best_one, steps_per_second(&one, x, y, 128, steps, 20));
    if (two.num_replicas_in_sync() == 2) best_two = std::max(best_two, steps_per_second(&two, x, y, 128, steps, 20));
  }
  std::printf("flagship MLP, global batch 128, %d steps x %d rounds (best round)\n", steps, rounds);
  std::printf("no strategy:                    %8.1f steps/s\n", best_none);
  std::printf("MirroredStrategy, 1 device:     %8.1f steps/s  (%.3f x no strategy)\n", best_one, best_one / best_none);
  std::printf("MirroredStrategy, 2 devices:    %8.1f steps/s  (%.3f x 1 device)\n", best_two, best_two / best_one);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "strategy_overhead: %s\n", e.what());
  return 1;
}
