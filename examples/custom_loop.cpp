// TensorFlow's "Custom training with tf.distribute.Strategy" tutorial, in C++: the same loop,
// line for line (distributed_train_step with apply_gradients inside strategy.run).
// Run scripts/setup.sh first for the data.
#include <cstdio>
#include <cstdlib>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  using distribute::ReduceOp;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 5;

  distribute::MirroredStrategy strategy;  // every local device
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

  auto [train, test] = datasets::mnist::load_data();
  const Tensor x_train = flatten_and_scale_images(train.x), x_test = flatten_and_scale_images(test.x);
  const std::int64_t global_batch = 32 * strategy.num_replicas_in_sync();
  auto train_dist = strategy.experimental_distribute_dataset(
      data::Dataset::from_tensor_slices(x_train, train.y).shuffle(60000).batch(global_batch));

  auto scope = strategy.scope();  // the model's variables and the optimizer's slots are mirrored
  Sequential model({layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10)});
  auto loss_object = losses::SparseCategoricalCrossentropy({.from_logits = true});
  auto optimizer = optimizers::Adam(1e-3);
  metrics::SparseCategoricalAccuracy train_accuracy("train_accuracy"), test_accuracy("test_accuracy");

  auto train_step = [&](const data::Element& inputs) {
    const Tensor &images = inputs[0], &labels = inputs[1];
    GradientTape tape;
    const Tensor predictions = model(images, {.training = true});
    const Tensor loss = distribute::compute_average_loss(loss_object->per_example(labels, predictions));
    const auto vars = model.trainable_variables();
    optimizer->apply_gradients(tape.gradient(loss, vars), vars);  // all-reduced across replicas
    train_accuracy.update_state(labels, predictions);
    return loss;
  };

  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total_loss = 0;
    int num_batches = 0;
    auto it = train_dist.make_iterator();
    while (auto batch = it->next()) {
      total_loss += strategy.reduce(ReduceOp::kSum, strategy.run(train_step, *batch)).item();
      ++num_batches;
    }
    test_accuracy.update_state(test.y, model(x_test));
    std::printf("Epoch %d, Loss: %.4f, Accuracy: %.4f, Test Accuracy: %.4f\n", epoch + 1, total_loss / num_batches,
                train_accuracy.result(), test_accuracy.result());
    train_accuracy.reset_state();
    test_accuracy.reset_state();
  }
  return 0;
} catch (const lockstep::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
