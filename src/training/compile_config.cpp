#include "training/compile_config.hpp"

#include "lockstep/metrics/metric_config.hpp"

namespace lockstep::detail {

namespace {
using nlohmann::json;
}  // namespace

losses::LossPtr loss_from_json(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const losses::CrossentropyOptions o{.from_logits = j.at("config").value("from_logits", false)};
  if (cls == "sparse_categorical_crossentropy") return losses::SparseCategoricalCrossentropy(o);
  if (cls == "categorical_crossentropy") return losses::CategoricalCrossentropy(o);
  if (cls == "binary_crossentropy") return losses::BinaryCrossentropy(o);
  if (cls == "mean_squared_error") return losses::MeanSquaredError();
  if (cls == "mean_absolute_error") return losses::MeanAbsoluteError();
  throw IOError("unknown loss class_name '" + cls +
                "' (lockstep knows sparse_categorical_crossentropy, categorical_crossentropy, binary_crossentropy, "
                "mean_squared_error, mean_absolute_error)");
}

json metric_identifiers(const Model& model, std::size_t k, bool weighted) {
  const losses::LossPtr& loss = model.output_losses().empty() ? model.loss() : model.output_losses()[k].loss;
  json out = json::array();
  for (std::size_t i = 0; i < model.metrics().size(); ++i) {
    if (model.metric_outputs()[i] != k || model.metric_weighted()[i] != weighted) continue;
    out.push_back(metrics::identifier(*model.metrics()[i], loss->name()));
  }
  return out;
}

}  // namespace lockstep::detail
