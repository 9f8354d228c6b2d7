#pragma once
// The compile config (optimizer and loss) as {"class_name", "config"} JSON: what lockstep's saved
// models write and read, and what Keras files are translated to and from.
#include <nlohmann/json.hpp>

#include "lockstep/losses/loss.hpp"
#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::detail {

/// {"class_name": "Adam", "config": {"learning_rate", "beta_1", ...}}: the learning rate (a
/// schedule Keras has a class for as Keras serialises it, any other schedule as the rate current
/// now), clipping options and the optimizer's hyperparameters.
nlohmann::json optimizer_to_json(const optimizers::Optimizer& opt);
/// SGD, Adam, AdamW or RMSprop; IOError naming another class; nlohmann's exceptions for mistyped fields.
optimizers::OptimizerPtr optimizer_from_json(const nlohmann::json& j);
/// {"class_name": "sparse_categorical_crossentropy", "config": {"from_logits": false}}; IOError
/// naming an unknown class.
losses::LossPtr loss_from_json(const nlohmann::json& j);

}  // namespace lockstep::detail
