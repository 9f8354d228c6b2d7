// MirroredStrategy's cost: the flagship MLP's training steps per second at global batch 128
// with no strategy, with MirroredStrategy on one device (same cores) and on 2 devices, in one
// process, interleaved rounds, best round of each. Prints the ratios.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <lockstep/lockstep.hpp>

using namespace lockstep;

namespace {
double steps_per_second(distribute::Strategy* strategy, const Tensor& x, const Tensor& y, int steps) {
  set_random_seed(1);
  std::unique_ptr<Sequential> model;
  auto make = [&] {
    model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
    model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  };
  if (strategy) {
    auto scope = strategy->scope();
    make();
  } else {
    make();
  }
  const std::int64_t batch = 128, batches = x.dim(0) / batch;
  for (int i = 0; i < 20; ++i) model->train_step(x.slice(0, batch), y.slice(0, batch));  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    const std::int64_t b = (i % batches) * batch;
    model->train_step(x.slice(b, b + batch), y.slice(b, b + batch));
  }
  return steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  auto [train, test] = datasets::mnist::load_data();
  const Tensor x = flatten_and_scale_images(train.x.slice(0, 12800));
  const Tensor y = train.y.slice(0, 12800);
  distribute::MirroredStrategy one({.num_cpu_devices = 1});
  distribute::MirroredStrategy two({.num_cpu_devices = 2});
  double best_none = 0, best_one = 0, best_two = 0;
  for (int r = 0; r < rounds; ++r) {
    best_none = std::max(best_none, steps_per_second(nullptr, x, y, steps));
    best_one = std::max(best_one, steps_per_second(&one, x, y, steps));
    if (two.num_replicas_in_sync() == 2) best_two = std::max(best_two, steps_per_second(&two, x, y, steps));
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
