#pragma once
// The flagship MLP as the benches train it: Dense(128, relu) -> Dropout(0.2) -> Dense(10,
// softmax), Adam(1e-3), sparse categorical cross-entropy, accuracy; seed 1. Made under
// `strategy`'s scope when one is given (what `lockstep train --model mlp` builds). With
// `rescaling`, Input(784) and Rescaling(1 / 255) come first and the model takes uint8 pixels
// (the same numbers reach the first Dense layer; the initial weights differ).
// (bench/compare_commits.sh writes its own copy into the driver it builds against old commits.)
#include <memory>
#include <vector>

#include <lockstep/lockstep.hpp>

inline std::unique_ptr<lockstep::Sequential> make_flagship(lockstep::distribute::Strategy* strategy,
                                                          bool rescaling = false) {
  using namespace lockstep;
  set_random_seed(1);
  const auto make = [rescaling] {
    auto model = std::make_unique<Sequential>();
    if (rescaling) {
      model->add(layers::Input(Shape{784}));
      model->add(layers::Rescaling(1.0f / 255.0f));
    }
    model->add(rescaling ? layers::Dense(128, "relu") : layers::Dense(128, "relu", 784));
    model->add(layers::Dropout(0.2));
    model->add(layers::Dense(10, "softmax"));
    model->compile(optimizers::Adam(1e-3), losses::SparseCategoricalCrossentropy(), {"accuracy"});
    return model;
  };
  if (!strategy) return make();
  auto scope = strategy->scope();
  return make();
}
