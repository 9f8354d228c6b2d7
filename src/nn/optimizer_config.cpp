#include "lockstep/optimizers/optimizer_config.hpp"

#include <string>

#include "lockstep/core/error.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::optimizers {

namespace {
using nlohmann::json;
using detail::ConfigReader;

// The rate (a number or a serialised schedule; the class's default where absent) and clipping,
// which every class reads; Keras' name and its EMA settings (which only its use_ema, refused
// unless off, reads) are passed over.
void base_options(ConfigReader& r, OptimizerOptions& o) {
  r.pass_over({"name", "ema_momentum", "ema_overwrite_frequency"});
  if (const json* rate = r.raw("learning_rate")) {
    if (rate->is_object()) {
      o.schedule = schedules::deserialize(*rate);
      o.learning_rate = o.schedule(0);
    } else {
      o.learning_rate = r.number("learning_rate");
    }
  }
  o.clipnorm = r.optional_number("clipnorm");
  o.global_clipnorm = r.optional_number("global_clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
}

// The optimizer of `cls` from its config's options, those read and refused by one reader.
OptimizerPtr make(const std::string& cls, ConfigReader& r) {
  if (cls == "SGD") {
    SGDOptions o;
    base_options(r, o);
    o.momentum = r.number("momentum", o.momentum);
    o.nesterov = r.boolean("nesterov", o.nesterov);
    r.refuse("weight_decay", "use AdamW");
    r.refuse_the_rest();
    return SGD(o);
  }
  if (cls == "Adam" || cls == "AdamW") {
    AdamWOptions o;
    base_options(r, o);
    o.beta_1 = r.number("beta_1", o.beta_1);
    o.beta_2 = r.number("beta_2", o.beta_2);
    o.epsilon = r.number("epsilon", o.epsilon);
    if (cls == "AdamW") o.weight_decay = r.number("weight_decay", o.weight_decay);
    else r.refuse("weight_decay", "use AdamW");
    r.refuse_the_rest();
    if (cls == "Adam") return Adam(static_cast<const AdamOptions&>(o));
    return AdamW(o);
  }
  if (cls == "RMSprop") {
    RMSpropOptions o;
    base_options(r, o);
    o.rho = r.number("rho", o.rho);
    o.momentum = r.number("momentum", o.momentum);
    o.epsilon = r.number("epsilon", o.epsilon);
    o.centered = r.boolean("centered", o.centered);
    r.refuse("weight_decay", "use AdamW");
    r.refuse_the_rest();
    return RMSprop(o);
  }
  throw ValueError("optimizer " + cls + " is not supported (lockstep has SGD, Adam, AdamW, RMSprop)");
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
  ConfigReader reader("optimizer " + cls, j.at("config"));
  return make(cls, reader);
}

}  // namespace lockstep::optimizers
