#include "training/compile_config.hpp"

#include "lockstep/optimizers/schedules.hpp"

namespace lockstep::detail {

namespace {
using nlohmann::json;
}  // namespace

json optimizer_to_json(const optimizers::Optimizer& opt) {
  const auto& o = opt.options();
  // A schedule Keras has a class for is saved as that class (so training resumes on it); any
  // other as the rate current now.
  json schedule = o.schedule ? optimizers::schedules::serialize(o.schedule) : json();
  json config = {{"learning_rate", schedule.is_null() ? json(opt.current_learning_rate()) : std::move(schedule)}};
  if (o.clipnorm) config["clipnorm"] = *o.clipnorm;
  if (o.global_clipnorm) config["global_clipnorm"] = *o.global_clipnorm;
  if (o.clipvalue) config["clipvalue"] = *o.clipvalue;
  for (const auto& [key, value] : opt.hyperparameters()) {
    if (key == "nesterov" || key == "centered") config[key] = value != 0.0;
    else config[key] = value;
  }
  return {{"class_name", opt.name()}, {"config", config}};
}

namespace {
template <typename Options>
void base_options_from_json(const json& c, Options& o) {
  const json& lr = c.at("learning_rate");
  if (lr.is_object()) {
    o.schedule = optimizers::schedules::deserialize(lr);
    o.learning_rate = o.schedule(0);
  } else {
    o.learning_rate = lr.get<double>();
  }
  if (c.contains("clipnorm")) o.clipnorm = c.at("clipnorm").get<double>();
  if (c.contains("global_clipnorm")) o.global_clipnorm = c.at("global_clipnorm").get<double>();
  if (c.contains("clipvalue")) o.clipvalue = c.at("clipvalue").get<double>();
}

}  // namespace

optimizers::OptimizerPtr optimizer_from_json(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  if (cls == "SGD") {
    optimizers::SGDOptions o;
    base_options_from_json(c, o);
    o.momentum = c.value("momentum", 0.0);
    o.nesterov = c.value("nesterov", false);
    return optimizers::SGD(o);
  }
  if (cls == "Adam" || cls == "AdamW") {
    optimizers::AdamWOptions o;
    base_options_from_json(c, o);
    o.beta_1 = c.value("beta_1", o.beta_1);
    o.beta_2 = c.value("beta_2", o.beta_2);
    o.epsilon = c.value("epsilon", o.epsilon);
    if (cls == "Adam") return optimizers::Adam(static_cast<const optimizers::AdamOptions&>(o));
    o.weight_decay = c.value("weight_decay", o.weight_decay);
    return optimizers::AdamW(o);
  }
  if (cls == "RMSprop") {
    optimizers::RMSpropOptions o;
    base_options_from_json(c, o);
    o.rho = c.value("rho", o.rho);
    o.momentum = c.value("momentum", o.momentum);
    o.epsilon = c.value("epsilon", o.epsilon);
    o.centered = c.value("centered", o.centered);
    return optimizers::RMSprop(o);
  }
  throw IOError("unknown optimizer class_name '" + cls + "' (lockstep knows SGD, Adam, AdamW, RMSprop)");
}

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

}  // namespace lockstep::detail
