// MNIST through an input pipeline: a parallel map normalises the images on input threads,
// then shuffle, batch and prefetch keep the next batch ready while the model trains.
// Run scripts/setup.sh first for the data.
#include <iostream>

#include <lockstep/lockstep.hpp>

int main() try {
  using namespace lockstep;
  auto [train, test] = datasets::mnist::load_data();

  // Every local device; fit splits each global batch over the replicas and reserves their cores
  // in data::ThreadBudget while it trains, so the map below autotunes within what is left.
  distribute::MirroredStrategy strategy;
  std::cout << "Detected " << strategy.num_replicas_in_sync() << " devices\n";
  auto guard = strategy.scope();
  Sequential model({layers::Dense(128, "relu", /*input_dim=*/784), layers::Dropout(0.2),
                    layers::Dense(10, "softmax")});
  model.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});

  // One uint8 image (28, 28) and its label in; a float32 (784,) in [0, 1] and the label out.
  // Runs on pipeline threads (kAutotune picks how many), so it must not touch shared state.
  const auto normalise = [](data::Element e) {
    return data::Element{div(cast(e[0], DType::kF32).reshape({784}), Tensor::scalar(255.0)), e[1]};
  };
  const std::int64_t kBatch = 32 * strategy.num_replicas_in_sync();  // 32 per replica
  auto ds = data::Dataset::from_tensor_slices(train.x, train.y)
                .shuffle(60000)
                .map(normalise, data::kAutotune)
                .batch(kBatch)
                .repeat()
                .prefetch(data::kAutotune);
  model.fit(ds, {.epochs = 5, .steps_per_epoch = 60000 / kBatch});

  const Logs result = model.evaluate(flatten_and_scale_images(test.x), test.y, {.batch_size = 256});
  std::cout << "test loss " << result.at("loss") << ", test accuracy " << result.at("accuracy") << "\n";
  return 0;
} catch (const lockstep::Error& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
