// TensorFlow's custom training loop with MirroredStrategy ("distributed_train_step"), in C++.
// Run scripts/setup.sh first for the data.
#include <cstdio>

#include <lockstep/lockstep.hpp>

int main(int argc, char** argv) try {
  using namespace lockstep;
  using distribute::ReduceOp;
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 5;

  distribute::MirroredStrategy strategy;  // every local device
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

  auto [train, test] = datasets::mnist::load_data();
  const Tensor x_train = flatten_and_scale_images(train.x), x_test = flatten_and_scale_images(test.x);
  const std::int64_t batch_per_replica = 32;
  const std::int64_t global_batch = batch_per_replica * strategy.num_replicas_in_sync();
  auto train_ds = data::Dataset::from_tensor_slices(x_train, train.y).shuffle(60000).batch(global_batch);
  auto dist_ds = strategy.experimental_distribute_dataset(train_ds);

  auto scope = strategy.scope();  // the model's variables and the optimizer's slots are mirrored
  Sequential model({layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
  auto optimizer = optimizers::Adam(1e-3);
  auto loss_object = losses::SparseCategoricalCrossentropy();
  const auto vars = model.trainable_variables();

  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total_loss = 0;
    std::int64_t batches = 0, correct = 0, seen = 0;
    auto it = dist_ds.make_iterator();
    while (auto batch = it->next()) {
      const std::int64_t step = optimizer->iterations();
      // distributed_train_step: each replica trains on its slice; gradients are summed.
      auto per_replica = strategy.run([&](distribute::ReplicaContext& ctx) {
        const int r = ctx.replica_id_in_sync_group();
        const Tensor& x = batch->slices[static_cast<std::size_t>(r)][0];
        const Tensor& y = batch->slices[static_cast<std::size_t>(r)][1];
        const layers::CallContext call{.training = true,
                                       .seed = model.seed(),
                                       .step = static_cast<std::uint64_t>(step),
                                       .first_example = batch->offsets[static_cast<std::size_t>(r)]};
        GradientTape tape;
        const auto out = model.forward(x, call);
        const Tensor loss = distribute::compute_average_loss(loss_object->per_example(y, out.output, out.logits),
                                                             batch->global_size);
        std::vector<Tensor> grads = tape.gradient(loss, vars);
        ctx.all_reduce_gradients(grads, vars);
        std::vector<std::pair<Tensor, Variable>> gv;
        for (std::size_t i = 0; i < vars.size(); ++i) gv.emplace_back(grads[i], vars[i]);
        optimizer->apply_gradients_at(gv, step);
        return std::pair<Tensor, Tensor>{loss, sparse_categorical_matches(y, out.output)};
      });
      optimizer->finish_step();
      distribute::PerReplica<Tensor> losses, matches;
      for (auto& [l, m] : per_replica.values()) {
        losses.values().push_back(l);
        matches.values().push_back(m);
      }
      total_loss += strategy.reduce(ReduceOp::kSum, losses).item();
      correct += static_cast<std::int64_t>(strategy.reduce(ReduceOp::kSum, matches, 0).item());
      seen += batch->global_size;
      ++batches;
    }
    const Tensor test_pred = model(x_test);
    const double test_acc = mean(sparse_categorical_matches(test.y, test_pred)).item();
    std::printf("Epoch %d, Loss: %.4f, Accuracy: %.4f, Test Accuracy: %.4f\n", epoch + 1,
                total_loss / static_cast<double>(batches), static_cast<double>(correct) / static_cast<double>(seen),
                test_acc);
  }
  return 0;
} catch (const lockstep::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
