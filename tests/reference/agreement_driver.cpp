// Writes the agreement directory that tests/reference/torch_agreement.py checks: the flagship
// MLP (without dropout, so that both sides compute the same function) trained for S Adam steps
// on real MNIST batches, with its initial weights, the batches, lockstep's per-step losses and
// its final weights (contract: tests/reference/README.md).
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  if (argc < 2) {
    std::cerr << "usage: agreement_driver DIR [STEPS] [BATCH]\n";
    return 2;
  }
  const std::string dir = argv[1];
  const std::int64_t steps = argc > 2 ? std::atoll(argv[2]) : 20;
  const std::int64_t batch = argc > 3 ? std::atoll(argv[3]) : 64;
  std::filesystem::create_directories(dir);
  const auto path = [&](const std::string& f) { return (std::filesystem::path(dir) / f).string(); };

  auto [train, test] = datasets::mnist::load_data();
  const Tensor x_all = flatten_and_scale_images(train.x.slice(0, steps * batch));
  const Tensor y_all = train.y.slice(0, steps * batch).to(DType::kI64);

  set_random_seed(1234);
  Sequential model({layers::Dense(128, "relu", 784), layers::Dense(10, "softmax")});
  model.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
  const auto vars = model.trainable_variables();  // kernel0, bias0, kernel1, bias1
  const char* names[] = {"w0", "b0", "w1", "b1"};
  for (int i = 0; i < 4; ++i) data::write_npy(path(std::string(names[i]) + ".npy"), vars[static_cast<std::size_t>(i)].value());
  data::write_npy(path("x.npy"), x_all.reshape({steps, batch, 784}));
  data::write_npy(path("y.npy"), y_all.reshape({steps, batch}));

  std::vector<float> losses;
  for (std::int64_t s = 0; s < steps; ++s) {
    losses.push_back(static_cast<float>(
        model.train_step(x_all.slice(s * batch, (s + 1) * batch), y_all.slice(s * batch, (s + 1) * batch))));
  }
  data::write_npy(path("lockstep_loss.npy"), Tensor::from_vector(losses, {steps}));
  for (int i = 0; i < 4; ++i)
    data::write_npy(path(std::string("lockstep_") + names[i] + ".npy"), vars[static_cast<std::size_t>(i)].value());
  std::cout << "wrote " << dir << ": " << steps << " steps of batch " << batch << ", last loss " << losses.back()
            << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "agreement_driver: " << e.what() << "\n";
  return 1;
}
