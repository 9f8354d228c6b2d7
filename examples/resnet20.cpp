// ResNet-20 (He et al. 2016; Keras' CIFAR-10 ResNet v1 example), a functional model with
// residual Adds and synchronised BatchNormalization, trained with MirroredStrategy on every
// local device. applications::ResNet20 builds it with lockstep::Input, lockstep::call and
// Functional (src/training/applications.cpp); see the README for the functional API.
//   resnet20 [EPOCHS] [DATA.npz]   (default 1 epoch of MNIST; an .npz as keras.datasets returns
//                                   it, e.g. CIFAR-10's x_train (50000, 32, 32, 3) uint8, y_train, ...)
#include <cstdlib>
#include <iostream>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 1;
  const datasets::TrainTest data = argc > 2 ? datasets::load_npz(argv[2]) : datasets::mnist::load_data();
  const auto& [train, test] = data;

  distribute::MirroredStrategy strategy;  // every local device
  std::cout << "Number of devices: " << strategy.num_replicas_in_sync() << "\n";

  // uint8 images (N, H, W[, C]) as float32 (N, H, W, C) in [0, 1]: channels last.
  Shape image = train.x.shape().tail();
  if (image.rank() == 2) image = Shape{image[0], image[1], 1};
  const auto images = [&](const Tensor& x) {
    return flatten_and_scale_images(x).reshape({x.dim(0), image[0], image[1], image[2]});
  };
  const Tensor x_train = images(train.x), x_test = images(test.x);

  auto scope = strategy.scope();  // variables made now are mirrored on every device
  // SyncBatchNorm: each replica normalises with the global batch's statistics.
  auto model = applications::ResNet20(
      {.input_shape = image, .classes = datasets::num_classes(data), .synchronized_batch_norm = true});
  std::cout << model->summary();
  model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});

  // 128 examples per step, split over the replicas; gradients are all-reduced every step.
  auto ds = data::Dataset::from_tensor_slices(x_train, train.y).shuffle(x_train.dim(0)).batch(128);
  model->fit(ds, {.epochs = epochs, .validation_data = data::Dataset::from_tensor_slices(x_test, test.y).batch(512)});
  const Logs result = model->evaluate(x_test, test.y, {.batch_size = 512});
  std::cout << "Test loss: " << result.at("loss") << "\nTest accuracy: " << result.at("accuracy") << "\n";
  return 0;
} catch (const lockstep::Error& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
