#pragma once
// The train step's loss gradient seeded one kernel (loss_seed, at the per-example losses) against
// the way it was seeded before (aaf2dcb): the summed loss scaled by the step's factor and
// differentiated from a seed of ones, each step's update applied by the optimizer. A model of
// Dense(16, relu) -> Dense(4, softmax) trained by Adam (under a LossScaleOptimizer when asked),
// on `device` ("cpu" or "gpu:0"), batch 16: the weights after each way's steps.
#include <memory>
#include <string>
#include <vector>

#include "common/random_data.hpp"
#include "lockstep/autograd/gradient_tape.hpp"
#include "lockstep/core/loss_scale_math.hpp"
#include "lockstep/lockstep.hpp"
#include "lockstep/optimizers/loss_scale_optimizer.hpp"

namespace lockstep::test {

inline std::vector<std::vector<float>> weights_after_steps(const std::string& device, bool loss_scaled,
                                                           bool summed_loss_seed, int steps) {
  distribute::OneDeviceStrategy strategy(device);
  std::unique_ptr<Sequential> m;
  {
    auto scope = strategy.scope();
    set_random_seed(3);
    m = std::make_unique<Sequential>(
        std::vector<layers::LayerPtr>{layers::Dense(16, "relu", 8), layers::Dense(4, "softmax")});
    optimizers::OptimizerPtr adam = optimizers::Adam(1e-2);
    m->compile(loss_scaled ? optimizers::LossScale(adam, {.initial_scale = 1024}) : adam,
               losses::SparseCategoricalCrossentropy());
  }
  for (int step = 0; step < steps; ++step) {
    const Classification d = random_classification(16, 8, 4, 10 + static_cast<std::uint64_t>(step));
    if (!summed_loss_seed) {
      (void)m->train_step(d.x, d.y);
      continue;
    }
    const ComputeScope on(strategy.context(0));
    const Device dev = Device::parse(device);
    const Tensor x = d.x.to(dev), y = d.y.to(dev);
    const auto vars = m->trainable_variables();
    const auto* scaled = dynamic_cast<const optimizers::LossScaleOptimizer*>(m->optimizer().get());
    std::vector<Tensor> grads;
    {
      GradientTape tape;
      const Model::Output out = m->forward(x, layers::CallContext{.training = true});
      const Tensor loss_sum = sum(m->loss()->per_example(y, out.output, out.logits));
      const float factor = loss_scale_math::loss_factor(1.0 / 16.0, scaled ? scaled->loss_scale() : 1.0);
      grads = tape.gradient(scale(loss_sum, factor), vars);
    }
    m->optimizer()->apply_gradients(grads, vars);
  }
  std::vector<std::vector<float>> weights;
  for (const auto& v : m->trainable_variables()) weights.push_back(v.read_value().to_vector<float>());
  return weights;
}

}  // namespace lockstep::test
