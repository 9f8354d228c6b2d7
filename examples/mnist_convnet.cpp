// Keras' "simple MNIST convnet" (keras.io/examples/vision/mnist_convnet), in C++, trained
// with MirroredStrategy on every local device. Run scripts/setup.sh first for the data.
//   mnist_convnet [EPOCHS]   (default 5)
#include <cstdlib>
#include <iostream>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 5;

  distribute::MirroredStrategy strategy;  // every local device
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << "\n";

  // Images (N, 28, 28) as (N, 28, 28, 1) floats in [0, 1]: channels last.
  auto [train, test] = datasets::mnist::load_data();
  const auto images = [](const Tensor& x) { return flatten_and_scale_images(x).reshape({x.dim(0), 28, 28, 1}); };
  const Tensor x_train = images(train.x), x_test = images(test.x);

  auto scope = strategy.scope();  // variables made now are mirrored on every device
  Sequential model({layers::Input({28, 28, 1}), layers::Conv2D(32, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}),
                    layers::Conv2D(64, {3, 3}, "relu"), layers::MaxPooling2D({2, 2}), layers::Flatten(),
                    layers::Dropout(0.5), layers::Dense(10, "softmax")});
  std::cout << model.summary();
  model.compile(optimizers::Adam(2e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});

  // The global batch is split over the replicas; gradients are all-reduced every step.
  const std::int64_t global_batch = 64;
  auto ds = data::Dataset::from_tensor_slices(x_train, train.y).shuffle(60000).batch(global_batch);
  model.fit(ds, {.epochs = epochs, .validation_data = data::Dataset::from_tensor_slices(x_test, test.y).batch(1024)});
  const Logs result = model.evaluate(x_test, test.y, {.batch_size = 1024});
  std::cout << "Test loss: " << result.at("loss") << "\nTest accuracy: " << result.at("accuracy") << "\n";
  return 0;
} catch (const lockstep::Error& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
