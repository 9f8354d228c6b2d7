#pragma once
// The compile config's loss as {"class_name", "config"} JSON: what lockstep's saved models write
// and read, and what Keras files are translated to and from (the optimizer's:
// lockstep/optimizers/optimizer_config.hpp).
#include <nlohmann/json.hpp>

#include "lockstep/losses/loss.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// {"class_name": "sparse_categorical_crossentropy", "config": {"from_logits": false}}; IOError
/// naming an unknown class.
losses::LossPtr loss_from_json(const nlohmann::json& j);

/// The metrics of output k of a model of several, as a compile config lists them (unprefixed, as
/// compile was given them): each a name where it makes the same metric, else Keras' object
/// (metrics::identifier, with the output's loss). What .keras files and saved folders write, and
/// metrics::deserialize reads back.
nlohmann::json output_metric_identifiers(const Model& model, std::size_t k);

}  // namespace lockstep::detail
