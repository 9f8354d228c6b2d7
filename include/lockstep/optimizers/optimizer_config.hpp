#pragma once
// Keras' optimizer configs, {"class_name": "Adam", "config": {"learning_rate": ..., "beta_1": ...}}:
// what saved models and .keras compile configs hold and Python's keras.optimizers classes hand over
// (keras.optimizers.serialize / deserialize). One reader and one writer for all three.
#include <nlohmann/json.hpp>

#include "lockstep/optimizers/optimizer.hpp"

namespace lockstep::optimizers {

/// The learning rate (a schedule Keras has a class for as Keras serialises it, any other schedule
/// as the rate current now), the clipping options set and the rule's hyperparameters.
nlohmann::json serialize(const Optimizer& opt);
/// SGD, Adam, AdamW or RMSprop from their Keras config: `learning_rate` a number or a serialised
/// schedule; an option that is null or absent takes its default (Keras writes "clipnorm": null).
/// The one owner of the options each class takes: ValueError naming another class, and an option
/// the class does not read unless Keras' "off" (null or false; Keras' name and EMA settings are
/// passed over), e.g. "optimizer argument amsgrad=true is not supported" or "optimizer SGD
/// weight_decay is not supported (use AdamW)"; nlohmann's exceptions for mistyped fields.
OptimizerPtr deserialize(const nlohmann::json& j);

}  // namespace lockstep::optimizers
