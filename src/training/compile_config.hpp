#pragma once
// The compile config's loss as {"class_name", "config"} JSON: what lockstep's saved models write
// and read, and what Keras files are translated to and from (the optimizer's:
// lockstep/optimizers/optimizer_config.hpp).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lockstep/losses/loss.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// {"class_name": "sparse_categorical_crossentropy", "config": {"from_logits": false}}; IOError
/// naming an unknown class.
losses::LossPtr loss_from_json(const nlohmann::json& j);

/// What compile takes, as a saved model's or a Keras file's compile config holds it (each read into
/// these its own way): the optimizer; for a model of one output its loss (as loss_from_json reads
/// it), metrics and weighted metrics (names or serialised objects, made with the output's loss by
/// metrics::deserialize); for a model of several the same by output name, with the losses'
/// weights; jit_compile and steps_per_execution.
struct CompileParts {
  optimizers::OptimizerPtr optimizer;
  nlohmann::json loss;
  std::vector<nlohmann::json> metrics, weighted_metrics;
  std::map<std::string, nlohmann::json> losses;
  std::map<std::string, double> loss_weights;
  std::map<std::string, std::vector<nlohmann::json>> output_metrics, output_weighted_metrics;
  JitCompile jit_compile = JitCompile::kAuto;
  std::int64_t steps_per_execution = 1;
};

/// Compiles a loaded `model` from `parts`: compile, then add_weighted_metrics (per output, in the
/// outputs' order), jit_compile and steps_per_execution. The one way a saved model or a Keras file
/// is compiled as it was; their errors (an unknown loss or metric) as compile's.
void compile_from_parts(Model& model, const CompileParts& parts);

/// A compiled model's metrics of output k (0 for a model of one), its weighted ones
/// (add_weighted_metrics) or the others, as compile was given them: metrics::identifier of each
/// under the name it was given (not its log's): a name, or Keras' object.
nlohmann::json metric_identifiers(const Model& model, std::size_t k, bool weighted);

}  // namespace lockstep::detail
