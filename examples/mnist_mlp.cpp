// The flagship example: Keras' MNIST MLP, in C++. Run scripts/setup.sh first for the data.
#include <iostream>

#include <lockstep/lockstep.hpp>

int main() try {
  using namespace lockstep;
  auto [train, test] = datasets::mnist::load_data();
  const Tensor x_train = flatten_and_scale_images(train.x), x_test = flatten_and_scale_images(test.x);

  Sequential model({layers::Dense(128, "relu", /*input_dim=*/784), layers::Dropout(0.2),
                    layers::Dense(10, "softmax")});
  std::cout << model.summary();
  model.compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});

  auto ds = data::Dataset::from_tensor_slices(x_train, train.y).shuffle(60000).batch(64).repeat();
  model.fit(ds, {.epochs = 5, .steps_per_epoch = 60000 / 64});
  const Logs result = model.evaluate(x_test, test.y, {.batch_size = 256});
  std::cout << "test loss " << result.at("loss") << ", test accuracy " << result.at("accuracy") << "\n";
  return 0;
} catch (const lockstep::Error& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
