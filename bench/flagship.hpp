#pragma once
// The flagship MLP as the benches train it (what `lockstep train --model mlp` builds):
// Dense(128, relu) -> Dropout(0.2) -> Dense(10, softmax), Adam(1e-3), sparse categorical
// cross-entropy, accuracy; seed 1. Made under `strategy`'s scope when one is given.
// (bench/compare_commits.sh writes its own copy into the driver it builds against old commits.)
#include <memory>
#include <vector>

#include <lockstep/lockstep.hpp>

inline std::unique_ptr<lockstep::Sequential> make_flagship(lockstep::distribute::Strategy* strategy) {
  using namespace lockstep;
  set_random_seed(1);
  const auto make = [] {
    auto model = std::make_unique<Sequential>(std::vector<layers::LayerPtr>{
        layers::Dense(128, "relu", 784), layers::Dropout(0.2), layers::Dense(10, "softmax")});
    model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    return model;
  };
  if (!strategy) return make();
  auto scope = strategy->scope();
  return make();
}
