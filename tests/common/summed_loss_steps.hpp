#pragma once
// The train step's loss gradient seeded one kernel (loss_seed, at the per-example losses) against
// the way it was seeded before (aaf2dcb): the summed loss scaled by the step's factor and
// differentiated from a seed of ones, each step's update applied by the optimizer. A model of
// Dense(16, relu) -> Dense(4, softmax) trained by Adam (under a LossScaleOptimizer when asked),
// on `device` ("cpu" or "gpu:0"), batch 16: the weights after each way's steps.
#include <cstdint>
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

// The same for a Functional model of two outputs (Dense(16, relu) -> "cls": Dense(4, softmax),
// sparse cross-entropy, weight 1; "reg": Dense(1), mse, weight `reg_weight`): each output's
// per-example losses seeded with its weight (loss_seed) against the way before: the outputs'
// sums, weighted (scale) and added up, the total scaled by the step's factor and differentiated
// from a seed of ones. Each step trains one batch of 16 by fit.
inline std::vector<std::vector<float>> two_output_weights_after_steps(const std::string& device, bool loss_scaled,
                                                                      bool summed_loss_seed, float reg_weight,
                                                                      int steps) {
  distribute::OneDeviceStrategy strategy(device);
  std::unique_ptr<Functional> m;
  {
    auto scope = strategy.scope();
    set_random_seed(3);
    const auto named = [](layers::LayerPtr l, const char* name) {
      l->set_name(name);
      return l;
    };
    const KerasTensor in = Input({8});
    const KerasTensor h = call(layers::Dense(16, "relu"), in);
    m = std::make_unique<Functional>(in,
                                     std::vector<KerasTensor>{call(named(layers::Dense(4, "softmax"), "cls"), h),
                                                              call(named(layers::Dense(1), "reg"), h)},
                                     "two_outputs", 3);
    optimizers::OptimizerPtr adam = optimizers::Adam(1e-2);
    m->compile(loss_scaled ? optimizers::LossScale(adam, {.initial_scale = 1024}) : adam,
               {{"cls", losses::SparseCategoricalCrossentropy()}, {"reg", losses::MeanSquaredError()}}, {},
               {{"reg", static_cast<double>(reg_weight)}});
  }
  for (int step = 0; step < steps; ++step) {
    const Classification d = random_classification(16, 8, 4, 10 + static_cast<std::uint64_t>(step));
    const Tensor reg = random_uniform({16, 1}, 20 + static_cast<std::uint64_t>(step));
    if (!summed_loss_seed) {
      (void)m->fit({d.x}, {d.y, reg}, {.batch_size = 16, .shuffle = false, .verbose = 0});
      continue;
    }
    const ComputeScope on(strategy.context(0));
    const Device dev = Device::parse(device);
    const Tensor x = d.x.to(dev);
    const std::vector<Tensor> ys{d.y.to(dev), reg.to(dev)};
    const auto vars = m->trainable_variables();
    const auto* scaled = dynamic_cast<const optimizers::LossScaleOptimizer*>(m->optimizer().get());
    std::vector<Tensor> grads;
    {
      GradientTape tape;
      const std::vector<Model::Output> outs = m->forward_all({&x, 1}, layers::CallContext{.training = true});
      Tensor total;
      for (std::size_t k = 0; k < outs.size(); ++k) {
        const Model::OutputLoss& ol = m->output_losses()[k];
        const Tensor part = sum(ol.loss->per_example(ys[k], outs[k].output, outs[k].logits));
        const Tensor weighted = ol.weight == 1.0 ? part : scale(part, static_cast<float>(ol.weight));
        total = total.defined() ? add(total, weighted) : weighted;
      }
      const float factor = loss_scale_math::loss_factor(1.0 / 16.0, scaled ? scaled->loss_scale() : 1.0);
      grads = tape.gradient(scale(total, factor), vars);
    }
    m->optimizer()->apply_gradients(grads, vars);
  }
  std::vector<std::vector<float>> weights;
  for (const auto& v : m->trainable_variables()) weights.push_back(v.read_value().to_vector<float>());
  return weights;
}

}  // namespace lockstep::test
