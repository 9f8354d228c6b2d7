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

json output_metric_identifiers(const Model& model, std::size_t k) {
  const auto& head = model.output_losses().at(k);
  json listed = json::array();
  for (std::size_t i = 0; i < model.metrics().size(); ++i) {
    if (model.metric_outputs()[i] != k) continue;
    const metrics::MetricPtr unprefixed = model.metrics()[i]->clone_empty();
    unprefixed->set_name(unprefixed->name().substr(head.name.size() + 1));  // "<output>_" off
    listed.push_back(metrics::identifier(*unprefixed, head.loss->name()));
  }
  return listed;
}

}  // namespace lockstep::detail
