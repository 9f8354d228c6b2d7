#include "lockstep/optimizers/optimizer_config.hpp"

#include "lockstep/core/error.hpp"
#include "lockstep/optimizers/schedules.hpp"

namespace lockstep::optimizers {

namespace {
using nlohmann::json;

// config[key] where it is set: Keras writes an option it leaves off as null.
template <typename T>
T option(const json& c, const char* key, T otherwise) {
  const auto it = c.find(key);
  return it == c.end() || it->is_null() ? otherwise : it->get<T>();
}
std::optional<double> optional_option(const json& c, const char* key) {
  const auto it = c.find(key);
  return it == c.end() || it->is_null() ? std::nullopt : std::optional<double>(it->get<double>());
}

void base_options(const json& c, OptimizerOptions& o) {
  const json& lr = c.at("learning_rate");
  if (lr.is_object()) {
    o.schedule = schedules::deserialize(lr);
    o.learning_rate = o.schedule(0);
  } else {
    o.learning_rate = lr.get<double>();
  }
  o.clipnorm = optional_option(c, "clipnorm");
  o.global_clipnorm = optional_option(c, "global_clipnorm");
  o.clipvalue = optional_option(c, "clipvalue");
}
}  // namespace

json serialize(const Optimizer& opt) {
  const auto& o = opt.options();
  // A schedule Keras has a class for is saved as that class (so training resumes on it); any
  // other as the rate current now.
  json schedule = o.schedule ? schedules::serialize(o.schedule) : json();
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

OptimizerPtr deserialize(const json& j) {
  const auto cls = j.at("class_name").get<std::string>();
  const json& c = j.at("config");
  if (cls == "SGD") {
    SGDOptions o;
    base_options(c, o);
    o.momentum = option(c, "momentum", o.momentum);
    o.nesterov = option(c, "nesterov", o.nesterov);
    return SGD(o);
  }
  if (cls == "Adam" || cls == "AdamW") {
    AdamWOptions o;
    base_options(c, o);
    o.beta_1 = option(c, "beta_1", o.beta_1);
    o.beta_2 = option(c, "beta_2", o.beta_2);
    o.epsilon = option(c, "epsilon", o.epsilon);
    if (cls == "Adam") return Adam(static_cast<const AdamOptions&>(o));
    o.weight_decay = option(c, "weight_decay", o.weight_decay);
    return AdamW(o);
  }
  if (cls == "RMSprop") {
    RMSpropOptions o;
    base_options(c, o);
    o.rho = option(c, "rho", o.rho);
    o.momentum = option(c, "momentum", o.momentum);
    o.epsilon = option(c, "epsilon", o.epsilon);
    o.centered = option(c, "centered", o.centered);
    return RMSprop(o);
  }
  throw ValueError("lockstep does not support the optimizer " + cls + " yet (it has SGD, Adam, AdamW, RMSprop)");
}

}  // namespace lockstep::optimizers
