// What `fit` costs over bare Model::train_step (issue 9: fit >= 90% of bare), measured in one
// process so that a shared VM's drift (tens of percent from minute to minute) falls on both
// alike: the flagship MLP under MirroredStrategy, short segments of each mode interleaved,
// ROUNDS times:
//   bare             train_step on consecutive slices of the training set (views: no copy, no
//                    pipeline, no callbacks)
//   fit              model.fit over the pipeline `lockstep train` builds (from_tensor_slices of
//                    the pixels scaled to float32, shuffle over the whole set, batch, prefetch),
//                    one epoch of STEPS steps, on the same model
//   fit, inline      the same with LOCKSTEP_GATHER_AHEAD=0: each replica gathers its slice when
//                    its step starts, instead of its pool's workers gathering it ahead
//   fit, uint8       a second model, the flagship behind Rescaling(1 / 255) (the same weights at
//                    the start), fit over the uint8 pixels as they are: a quarter of the bytes to
//                    gather, but a cast and a scale in each replica's step
// Each segment's rate leaves out its first 5% of steps (fit's own warm-up rule). Prints every
// mode's median steps/s and the medians of the per-round ratios, which are the figures to
// read: a round's modes run within a second of each other.
//
//   fit_overhead [--replicas R] [--batch G] [--steps N] [--rounds K]
//     defaults: 1 replica (all cores in its pool; LOCKSTEP_CPU_THREADS applies), global batch
//     128, 400 steps per segment, 15 rounds
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <lockstep/lockstep.hpp>

#include "flagship.hpp"

using namespace lockstep;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int usage() {
  std::fprintf(stderr, "usage: fit_overhead [--replicas R] [--batch G] [--steps N] [--rounds K]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  int replicas = 1, steps = 400, rounds = 15;
  std::int64_t batch = 128;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage();
    const long long v = std::atoll(argv[i + 1]);
    if (flag == "--replicas") replicas = static_cast<int>(v);
    else if (flag == "--batch") batch = v;
    else if (flag == "--steps") steps = static_cast<int>(v);
    else if (flag == "--rounds") rounds = static_cast<int>(v);
    else return usage();
  }
  if (replicas < 1 || batch < replicas || steps < 40 || rounds < 1) return usage();

  auto [train, test] = datasets::mnist::load_data();
  const Tensor x = flatten_and_scale_images(train.x);
  const Tensor x_bytes = flatten_images_for(train.x, true);  // uint8
  const Tensor y = train.y;
  LOCKSTEP_CHECK(x.dim(0) >= batch, "fit_overhead: batch ", batch, " is larger than the ", x.dim(0), " examples");
  distribute::MirroredStrategy strategy({.num_cpu_devices = replicas});
  LOCKSTEP_CHECK(strategy.num_replicas_in_sync() == replicas, "fit_overhead: got ", strategy.num_replicas_in_sync(),
                 " replicas, asked for ", replicas);
  const std::unique_ptr<Sequential> model = make_flagship(&strategy);
  const std::unique_ptr<Sequential> model_bytes = make_flagship(&strategy, /*rescaling=*/true);
  const auto from = model->variables(), to = model_bytes->variables();
  for (std::size_t i = 0; i < from.size(); ++i) to[i].assign(from[i].value());
  const auto pipeline = [&](const Tensor& features) {
    return data::Dataset::from_tensor_slices(features, y)
        .shuffle(x.dim(0), 7)
        .batch(batch)
        .prefetch(data::kAutotune)
        .repeat();
  };
  const auto dataset = pipeline(x), dataset_bytes = pipeline(x_bytes);
  const int warmup = std::max(2, steps / 20);

  const std::int64_t batches = x.dim(0) / batch;
  std::int64_t next_batch = 0;
  const auto bare = [&] {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      if (i == warmup) t0 = std::chrono::steady_clock::now();
      const std::int64_t b = (next_batch++ % batches) * batch;
      model->train_step(x.slice(b, b + batch), y.slice(b, b + batch));
    }
    return (steps - warmup) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto fit = [&](Sequential& m, const data::Dataset& ds, bool ahead) {
    ::setenv("LOCKSTEP_GATHER_AHEAD", ahead ? "1" : "0", 1);
    m.fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0});
    return m.last_fit_timing().steps_per_second;
  };

  std::vector<double> r_bare, r_fit, r_inline, r_bytes, fit_over_bare, inline_over_bare, ahead_over_inline,
      bytes_over_float;
  for (int r = 0; r < rounds; ++r) {
    // The order turns each round, so that no mode always follows the same one.
    double b = 0, f = 0, n = 0, u = 0;
    for (int k = 0; k < 4; ++k) {
      switch ((r + k) % 4) {
        case 0: b = bare(); break;
        case 1: f = fit(*model, dataset, true); break;
        case 2: n = fit(*model, dataset, false); break;
        default: u = fit(*model_bytes, dataset_bytes, true); break;
      }
    }
    r_bare.push_back(b);
    r_fit.push_back(f);
    r_inline.push_back(n);
    r_bytes.push_back(u);
    fit_over_bare.push_back(f / b);
    inline_over_bare.push_back(n / b);
    ahead_over_inline.push_back(f / n);
    bytes_over_float.push_back(u / f);
    std::fprintf(stderr, "round %2d: bare %8.1f  fit %8.1f  fit, inline gather %8.1f  fit, uint8 %8.1f steps/s\n",
                 r + 1, b, f, n, u);
  }
  std::printf("flagship MLP, %d replica(s), global batch %lld, %d segments of %d steps per mode (median)\n", replicas,
              static_cast<long long>(batch), rounds, steps);
  std::printf("  bare train_step            %8.1f steps/s\n", median(r_bare));
  std::printf("  fit                        %8.1f steps/s\n", median(r_fit));
  std::printf("  fit, inline gather         %8.1f steps/s\n", median(r_inline));
  std::printf("  fit, uint8 + Rescaling     %8.1f steps/s\n", median(r_bytes));
  std::printf("  fit / bare                 %8.3f  (median of per-round ratios; goal >= 0.90)\n", median(fit_over_bare));
  std::printf("  fit, inline gather / bare  %8.3f\n", median(inline_over_bare));
  std::printf("  gather ahead / inline      %8.3f\n", median(ahead_over_inline));
  std::printf("  uint8 / float32 pixels     %8.3f  (fit)\n", median(bytes_over_float));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fit_overhead: %s\n", e.what());
  return 1;
}
