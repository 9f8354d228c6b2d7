// A custom training loop over experimental_distribute_dataset against `fit` (issue 36,
// acceptance 3: the custom loop >= 0.95 of fit's steps/s), in one process so that a shared
// VM's drift falls on both alike: the flagship MLP under MirroredStrategy (2 CPU replicas by
// default), global batch 128, short segments of each mode interleaved, ROUNDS times:
//   fit          model.fit over from_tensor_slices(pixels scaled to float32), shuffle over the
//                whole set, batch, prefetch, repeat: one epoch of STEPS steps
//   custom loop  the same pipeline through strategy.experimental_distribute_dataset, and per
//                step strategy.run(step) where step is TF's tutorial step: model(x, training),
//                compute_average_loss, GradientTape, optimizer->apply_gradients (on a second
//                flagship with the same initial weights)
// Each segment's rate leaves out its first 5% of steps (fit's own warm-up rule). Prints each
// mode's median steps/s and the median of the per-round ratios custom / fit with its range.
//
//   custom_loop_overhead [--replicas R] [--batch G] [--steps N] [--rounds K]
//     defaults: 2 replicas, global batch 128, 400 steps per segment, 15 rounds
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

// The median of per-round figures and their range.
struct Spread {
  double median = 0, low = 0, high = 0;
  explicit Spread(std::vector<double> v) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    const std::size_t mid = v.size() / 2;
    median = v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
    low = v.front();
    high = v.back();
  }
};

struct Args {
  int replicas = 2, steps = 400, rounds = 15;
  std::int64_t batch = 128;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const long long v = std::atoll(argv[i + 1]);
    if (flag == "--replicas") a.replicas = static_cast<int>(v);
    else if (flag == "--batch") a.batch = v;
    else if (flag == "--steps") a.steps = static_cast<int>(v);
    else if (flag == "--rounds") a.rounds = static_cast<int>(v);
    else return false;
  }
  return a.replicas >= 1 && a.batch >= a.replicas && a.steps >= 40 && a.rounds >= 1;
}

// `steps` custom-loop steps over a fresh iterator of `dist`; steps/s after the warm-up.
double custom_loop(distribute::MirroredStrategy& strategy, Sequential& model,
                   const distribute::Strategy::DistributedDataset& dist, int steps, int warmup) {
  const auto loss_object = model.loss();
  const auto& optimizer = model.optimizer();
  const auto step = [&](const data::Element& inputs) {
    const Tensor &images = inputs[0], &labels = inputs[1];
    GradientTape tape;
    const Tensor predictions = model(images, {.training = true});
    const Tensor loss = distribute::compute_average_loss(loss_object->per_example(labels, predictions));
    const auto vars = model.trainable_variables();
    optimizer->apply_gradients(tape.gradient(loss, vars), vars);  // all-reduced across replicas
    return loss;
  };
  auto it = dist.make_iterator();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    if (i == warmup) t0 = std::chrono::steady_clock::now();
    auto batch = it->next();
    LOCKSTEP_CHECK(batch.has_value(), "custom_loop_overhead: the repeated dataset ended");
    (void)strategy.reduce(distribute::ReduceOp::kSum, strategy.run(step, *batch));
  }
  return (steps - warmup) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: custom_loop_overhead [--replicas R] [--batch G] [--steps N] [--rounds K]\n");
    return 2;
  }
  auto [train, test] = datasets::mnist::load_data();
  const Tensor x = flatten_and_scale_images(train.x);
  LOCKSTEP_CHECK(x.dim(0) >= a.batch, "custom_loop_overhead: batch ", a.batch, " is larger than the ", x.dim(0),
                 " examples");
  distribute::MirroredStrategy strategy({.num_cpu_devices = a.replicas});
  LOCKSTEP_CHECK(strategy.num_replicas_in_sync() == a.replicas, "custom_loop_overhead: got ",
                 strategy.num_replicas_in_sync(), " replicas, asked for ", a.replicas);
  const std::unique_ptr<Sequential> fit_model = make_flagship(&strategy);
  const std::unique_ptr<Sequential> loop_model = make_flagship(&strategy);
  const auto from = fit_model->variables(), to = loop_model->variables();
  for (std::size_t i = 0; i < from.size(); ++i) to[i].assign(from[i].value());
  const auto dataset =
      data::Dataset::from_tensor_slices(x, train.y).shuffle(x.dim(0), 7).batch(a.batch).prefetch(data::kAutotune).repeat();
  const auto dist = strategy.experimental_distribute_dataset(dataset);
  const int warmup = std::max(2, a.steps / 20);

  std::vector<double> fit_rates, loop_rates, ratios;
  for (int r = 0; r < a.rounds; ++r) {
    double fit_rate = 0, loop_rate = 0;
    // The order turns each round, so that neither mode always follows the other.
    for (int k = 0; k < 2; ++k) {
      if ((r + k) % 2 == 0) {
        fit_model->fit(dataset, {.epochs = 1, .steps_per_epoch = a.steps, .verbose = 0});
        fit_rate = fit_model->last_fit_timing().steps_per_second;
      } else {
        loop_rate = custom_loop(strategy, *loop_model, dist, a.steps, warmup);
      }
    }
    std::fprintf(stderr, "round %2d:  fit %.1f  custom loop %.1f steps/s  (custom / fit %.3f)\n", r + 1, fit_rate,
                 loop_rate, loop_rate / fit_rate);
    fit_rates.push_back(fit_rate);
    loop_rates.push_back(loop_rate);
    ratios.push_back(loop_rate / fit_rate);
  }
  std::printf("flagship MLP, %d replica(s), global batch %lld, %d segments of %d steps per mode (median)\n", a.replicas,
              static_cast<long long>(a.batch), a.rounds, a.steps);
  const Spread ratio(ratios);
  std::printf("  fit                  %8.1f steps/s\n", Spread(fit_rates).median);
  std::printf("  custom loop          %8.1f steps/s\n", Spread(loop_rates).median);
  std::printf("  custom / fit         %8.3f  (median of per-round ratios, range %.3f to %.3f; goal >= 0.95)\n",
              ratio.median, ratio.low, ratio.high);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "custom_loop_overhead: %s\n", e.what());
  return 1;
}
