#pragma once
// The compile config's loss as {"class_name", "config"} JSON: what lockstep's saved models write
// and read, and what Keras files are translated to and from (the optimizer's:
// lockstep/optimizers/optimizer_config.hpp).
#include <nlohmann/json.hpp>

#include "lockstep/losses/loss.hpp"

namespace lockstep::detail {

/// {"class_name": "sparse_categorical_crossentropy", "config": {"from_logits": false}}; IOError
/// naming an unknown class.
losses::LossPtr loss_from_json(const nlohmann::json& j);

}  // namespace lockstep::detail
