#pragma once
// The compile config's loss as {"class_name", "config"} JSON: what lockstep's saved models write
// and read, and what Keras files are translated to and from (the optimizer's:
// lockstep/optimizers/optimizer_config.hpp).
#include <nlohmann/json.hpp>

#include <vector>

#include "lockstep/losses/loss.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// {"class_name": "sparse_categorical_crossentropy", "config": {"from_logits": false}}; IOError
/// naming an unknown class.
losses::LossPtr loss_from_json(const nlohmann::json& j);

/// A compiled model's metrics of output k (0 for a model of one), its weighted ones
/// (add_weighted_metrics) or the others, as compile was given them: metrics::identifier of each
/// under the name it was given (not its log's): a name, or Keras' object.
nlohmann::json metric_identifiers(const Model& model, std::size_t k, bool weighted);

}  // namespace lockstep::detail
