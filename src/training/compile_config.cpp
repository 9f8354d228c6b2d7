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

void compile_from_parts(Model& model, const CompileParts& parts) {
  const auto made = [](const std::vector<json>& identifiers, const losses::Loss& loss) {
    std::vector<metrics::MetricPtr> out;
    for (const json& m : identifiers) out.push_back(metrics::deserialize(m, loss.name()));
    return out;
  };
  if (model.output_structure().size() == 1) {
    const losses::LossPtr loss = loss_from_json(parts.loss);
    model.compile(parts.optimizer, loss, made(parts.metrics, *loss));
    if (!parts.weighted_metrics.empty()) model.add_weighted_metrics(made(parts.weighted_metrics, *loss));
  } else {
    std::map<std::string, losses::LossPtr> losses;
    std::map<std::string, std::vector<metrics::MetricPtr>> metrics;
    for (const auto& [name, loss] : parts.losses) losses[name] = loss_from_json(loss);
    for (const auto& [name, listed] : parts.output_metrics) {
      const auto loss = losses.find(name);
      if (loss == losses.end()) throw IOError("metrics are given for output '" + name + "', which has no loss");
      metrics[name] = made(listed, *loss->second);
    }
    model.compile(parts.optimizer, losses, std::move(metrics), parts.loss_weights);
    for (const auto& output : model.output_structure().names)
      if (const auto w = parts.output_weighted_metrics.find(output); w != parts.output_weighted_metrics.end())
        if (!w->second.empty()) {
          if (!losses.count(output)) throw IOError("weighted metrics are given for output '" + output + "', which has no loss");
          model.add_weighted_metrics(made(w->second, *losses.at(output)), output);
        }
  }
  model.set_jit_compile(parts.jit_compile);
  model.set_steps_per_execution(parts.steps_per_execution);
}

json metric_identifiers(const Model& model, std::size_t k, bool weighted) {
  const losses::LossPtr& loss = model.output_losses().empty() ? model.loss() : model.output_losses()[k].loss;
  json out = json::array();
  for (const Model::CompiledMetric& m : model.metrics())
    if (m.output == k && m.weighted == weighted) out.push_back(metrics::identifier(*m.metric, loss->name()));
  return out;
}

}  // namespace lockstep::detail
