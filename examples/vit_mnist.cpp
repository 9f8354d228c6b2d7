// A Vision Transformer on MNIST (or Fashion-MNIST), in C++, trained with MirroredStrategy on
// every local device: applications::ViT (patches, PositionEmbedding, pre-norm encoder blocks of
// MultiHeadAttention and a gelu MLP, then LayerNormalization, GlobalAveragePooling1D and the
// classifier). `lockstep train --model vit` trains the same model. Run scripts/setup.sh first for
// the data.
//   vit_mnist [EPOCHS] [mnist|fashion_mnist]   (default 5, mnist)
#include <cstdlib>
#include <iostream>
#include <string>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 5;
  const std::string dataset = argc > 2 ? argv[2] : "mnist";
  if (epochs < 1 || (dataset != "mnist" && dataset != "fashion_mnist")) {
    std::cerr << "usage: vit_mnist [EPOCHS >= 1] [mnist|fashion_mnist]\n";
    return 2;
  }

  distribute::MirroredStrategy strategy;  // every local device
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << "\n";

  // Images (N, 28, 28) as (N, 28, 28, 1) floats in [0, 1]: channels last.
  auto [train, test] = dataset == "mnist" ? datasets::mnist::load_data() : datasets::fashion_mnist::load_data();
  const auto images = [](const Tensor& x) { return flatten_and_scale_images(x).reshape({x.dim(0), 28, 28, 1}); };
  const Tensor x_train = images(train.x), x_test = images(test.x);

  auto scope = strategy.scope();  // variables made now are mirrored on every device
  auto model = applications::ViT({.input_shape = {28, 28, 1}, .classes = 10});
  std::cout << model->summary();
  model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});

  // The global batch is split over the replicas; gradients are all-reduced every step.
  const std::int64_t global_batch = 128;
  auto ds = data::Dataset::from_tensor_slices(x_train, train.y).shuffle(60000).batch(global_batch);
  model->fit(ds, {.epochs = epochs, .validation_data = data::Dataset::from_tensor_slices(x_test, test.y).batch(1024)});
  const Logs result = model->evaluate(x_test, test.y, {.batch_size = 1024});
  std::cout << "Test loss: " << result.at("loss") << "\nTest accuracy: " << result.at("accuracy") << "\n";
  return 0;
} catch (const lockstep::Error& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
