// TF's custom training loop on GPU replicas (issue 42): variables made in the scope live on the
// replicas' devices from the start (not only once compile/fit mirrors them), model(x) on host
// data works inside and after the loop on every layout, and a model made outside the scope gets
// Keras' message and its fix rather than a device mismatch. CI runs them on emulated GPUs.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "gpu_test_util.hpp"

using namespace lockstep;
using namespace lockstep::distribute;
using namespace lockstep::gpu_test;

namespace {

std::unique_ptr<Sequential> make_model() {
  set_random_seed(5);
  return std::make_unique<Sequential>(
      std::vector<layers::LayerPtr>{layers::Dense(16, "relu", 12), layers::Dropout(0.25), layers::Dense(4)});
}

// The layouts a GPU machine offers: one GPU, two logical replicas on it, and two GPUs.
std::vector<std::vector<std::string>> gpu_layouts() {
  std::vector<std::vector<std::string>> out{{"gpu:0"}, {"gpu:0x2"}};
  if (gpus() >= 2) out.push_back({"gpu:0", "gpu:1"});
  return out;
}

std::string joined(const std::vector<std::string>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ",") + d;
  return s;
}

// Two steps of TF's tutorial loop (apply_gradients inside strategy.run); returns the summed loss.
double tutorial_steps(Strategy& strategy, Sequential& model, optimizers::Optimizer& optimizer,
                      const test::Classification& d) {
  auto dist = strategy.experimental_distribute_dataset(data::Dataset::from_tensor_slices(d.x, d.y).batch(8));
  auto loss_object = losses::SparseCategoricalCrossentropy({.from_logits = true});
  double total = 0;
  auto it = dist.make_iterator();
  while (auto batch = it->next()) {
    total += strategy
                 .reduce(ReduceOp::kSum, strategy.run(
                                             [&](const data::Element& xy) {
                                               GradientTape tape;
                                               const Tensor logits = model(xy[0], {.training = true});
                                               const Tensor loss =
                                                   compute_average_loss(loss_object->per_example(xy[1], logits));
                                               const auto vars = model.trainable_variables();
                                               optimizer.apply_gradients(tape.gradient(loss, vars), vars);
                                               return loss;
                                             },
                                             *batch))
                 .item();
  }
  return total;
}

}  // namespace

TEST(GpuCustomLoop, VariablesLiveOnTheReplicasFromTheScopeAndModelOfHostDataWorksAfter) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16, 12, 4, 3);
  for (const auto& devices : gpu_layouts()) {
    SCOPED_TRACE(joined(devices));
    MirroredStrategy strategy({.devices = devices});
    auto scope = strategy.scope();
    auto model = make_model();
    // Placed at creation, as TF does: no compile or fit has run.
    for (const auto& v : model->variables()) {
      EXPECT_EQ(v.num_copies(), strategy.num_local_replicas()) << v.name();
      for (int r = 0; r < v.num_copies(); ++r) EXPECT_EQ(v.copy(r).device().kind, DeviceKind::kCuda) << v.name();
    }
    auto optimizer = optimizers::Adam(1e-2);
    const double loss = tutorial_steps(strategy, *model, *optimizer, d);
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_EQ(optimizer->iterations(), 2);
    // After the loop, on host data, on this (host) thread: the output is here, and is predict's.
    const Tensor out = (*model)(d.x);
    EXPECT_EQ(out.device().kind, DeviceKind::kCpu);
    EXPECT_EQ(out.shape(), Shape({16, 4}));
    model->compile(optimizers::SGD(0.0), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    const auto want = model->predict(d.x, {.batch_size = 16}).to_vector<float>();
    const auto got = out.to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << i;
    // Inside a replica function host data goes to the replica's device.
    const auto per_replica = strategy.run([&](ReplicaContext&) { return (*model)(d.x); });
    for (const Tensor& t : per_replica.values()) EXPECT_EQ(t.device().kind, DeviceKind::kCuda);
  }
}

TEST(GpuCustomLoop, AModelMadeOutsideTheScopeGetsKerasMessageOnGpuReplicas) {
  LOCKSTEP_REQUIRE_GPU();
  const test::Classification d = test::random_classification(16, 12, 4, 3);
  for (const auto& devices : gpu_layouts()) {
    SCOPED_TRACE(joined(devices));
    auto outside = make_model();  // its variables are on the host
    MirroredStrategy strategy({.devices = devices});
    auto optimizer = optimizers::SGD(0.1);
    const std::string msg = message_of([&] { tutorial_steps(strategy, *outside, *optimizer, d); });
    EXPECT_TRUE(has(msg, "was not created in the distribution strategy's scope")) << msg;
    EXPECT_TRUE(has(msg, "model.distribute(strategy)")) << msg;
    EXPECT_FALSE(has(msg, "different devices")) << msg;
    EXPECT_EQ(optimizer->iterations(), 0);
    // The fix works.
    outside->distribute(strategy);
    EXPECT_TRUE(std::isfinite(tutorial_steps(strategy, *outside, *optimizer, d)));
    EXPECT_EQ(optimizer->iterations(), 2);
  }
}
