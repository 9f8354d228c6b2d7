// What `fit` costs over bare Model::train_step (issue 9: fit >= 90% of bare), measured in one
// process so that a shared VM's drift (tens of percent from minute to minute) falls on both
// alike: the flagship MLP under MirroredStrategy, short segments of each mode interleaved,
// ROUNDS times:
//   bare             train_step on consecutive slices of the training set (views: no copy, no
//                    pipeline, no callbacks)
//   fit              model.fit over the pixels scaled to float32 beforehand (from_tensor_slices,
//                    shuffle over the whole set, batch, prefetch), one epoch of STEPS steps, on
//                    the same model
//   fit, inline      the same with FitOptions::gather_ahead false: each replica gathers its slice when
//                    its step starts, instead of its pool's workers gathering it ahead
//   fit, uint8 cast in pipeline
//                    what `lockstep train` builds: the uint8 pixels, cast_and_scale(1 / 255)
//                    before the shuffle, so that each slice is gathered from the bytes and cast
//                    in the same pass (the same floats: a quarter of the bytes to read)
//   fit, uint8 + Rescaling
//                    a second model, the flagship behind Rescaling(1 / 255) (the same weights at
//                    the start), fit over the uint8 pixels as they are: the cast and the scale
//                    in each replica's step instead
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
#include <functional>
#include <string>
#include <vector>

#include <lockstep/lockstep.hpp>

#include "flagship.hpp"
#include "median.hpp"

using namespace lockstep;

namespace {

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
  // lockstep train's pipeline: uint8 pixels cast to the same floats as the batch is gathered.
  const auto dataset_cast = data::Dataset::from_tensor_slices(x_bytes, y)
                                .cast_and_scale(kPixelScale)
                                .shuffle(x.dim(0), 7)
                                .batch(batch)
                                .prefetch(data::kAutotune)
                                .repeat();
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
    m.fit(ds, {.epochs = 1, .steps_per_epoch = steps, .verbose = 0, .gather_ahead = ahead});
    return m.last_fit_timing().steps_per_second;
  };

  struct Mode {
    const char* name;
    std::function<double()> run;
    std::vector<double> rates, over_bare;
  };
  std::vector<Mode> modes;
  modes.push_back({"bare train_step", bare, {}, {}});
  modes.push_back({"fit", [&] { return fit(*model, dataset, true); }, {}, {}});
  modes.push_back({"fit, inline gather", [&] { return fit(*model, dataset, false); }, {}, {}});
  modes.push_back({"fit, uint8 cast in pipeline", [&] { return fit(*model, dataset_cast, true); }, {}, {}});
  modes.push_back({"fit, uint8 + Rescaling", [&] { return fit(*model_bytes, dataset_bytes, true); }, {}, {}});
  const std::size_t n_modes = modes.size();
  std::vector<double> ahead_over_inline, cast_over_float, rescaling_over_float;
  for (int r = 0; r < rounds; ++r) {
    // The order turns each round, so that no mode always follows the same one.
    std::vector<double> rate(n_modes);
    for (std::size_t k = 0; k < n_modes; ++k) {
      const std::size_t m = (static_cast<std::size_t>(r) + k) % n_modes;
      rate[m] = modes[m].run();
    }
    std::fprintf(stderr, "round %2d:", r + 1);
    for (std::size_t m = 0; m < n_modes; ++m) {
      modes[m].rates.push_back(rate[m]);
      modes[m].over_bare.push_back(rate[m] / rate[0]);
      std::fprintf(stderr, "  %s %.1f", modes[m].name, rate[m]);
    }
    std::fprintf(stderr, " steps/s\n");
    ahead_over_inline.push_back(rate[1] / rate[2]);
    cast_over_float.push_back(rate[3] / rate[1]);
    rescaling_over_float.push_back(rate[4] / rate[1]);
  }
  std::printf("flagship MLP, %d replica(s), global batch %lld, %d segments of %d steps per mode (median)\n", replicas,
              static_cast<long long>(batch), rounds, steps);
  for (const Mode& m : modes) std::printf("  %-30s %8.1f steps/s\n", m.name, median(m.rates));
  for (std::size_t m = 1; m < n_modes; ++m)
    std::printf("  %-30s %8.3f  (median of per-round ratios / bare%s)\n", modes[m].name, median(modes[m].over_bare),
                m == 1 ? "; goal >= 0.90" : "");
  std::printf("  gather ahead / inline          %8.3f\n", median(ahead_over_inline));
  std::printf("  uint8 cast in pipeline / fit   %8.3f  (what lockstep train does / float32 pixels)\n",
              median(cast_over_float));
  std::printf("  uint8 + Rescaling / fit        %8.3f\n", median(rescaling_over_float));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fit_overhead: %s\n", e.what());
  return 1;
}
