#include "lockstep/optimizers/optimizer_config.hpp"

#include <set>
#include <string>

#include "lockstep/core/error.hpp"
#include "lockstep/optimizers/schedules.hpp"

namespace lockstep::optimizers {

namespace {
using nlohmann::json;

// A Keras optimizer config, read option by option; refuse_the_rest() refuses what no option read,
// so that the options an optimizer takes are the ones it reads (no list beside the reads to keep in
// step) and none is dropped silently.
class OptionReader {
 public:
  OptionReader(std::string cls, const json& config) : cls_(std::move(cls)), config_(config) {}

  // config[key] where it is set: Keras writes an option it leaves off as null.
  template <typename T>
  T option(const char* key, T otherwise) {
    read_.insert(key);
    const auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? otherwise : it->template get<T>();
  }
  std::optional<double> optional_option(const char* key) {
    read_.insert(key);
    const auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? std::nullopt : std::optional<double>(it->get<double>());
  }

  // The rate (a number or a serialised schedule; the class's default where absent) and clipping.
  void base_options(OptimizerOptions& o) {
    read_.insert("learning_rate");
    if (const auto it = config_.find("learning_rate"); it != config_.end()) {
      if (it->is_object()) {
        o.schedule = schedules::deserialize(*it);
        o.learning_rate = o.schedule(0);
      } else if (it->is_number()) {
        o.learning_rate = it->get<double>();
      } else {
        throw ValueError("optimizer learning_rate=" + it->dump().substr(0, 120) + " is not supported");
      }
    }
    o.clipnorm = optional_option("clipnorm");
    o.global_clipnorm = optional_option("global_clipnorm");
    o.clipvalue = optional_option("clipvalue");
  }

  // ValueError naming the first option no read took, unless Keras' "off" (null or false).
  void refuse_the_rest() const {
    // Keras' name, and its EMA settings, which only its use_ema (refused unless off) reads.
    static const std::set<std::string> kLeft = {"name", "ema_momentum", "ema_overwrite_frequency"};
    for (const auto& [key, value] : config_.items()) {
      if (read_.contains(key) || kLeft.contains(key)) continue;
      if (key == "weight_decay" && !value.is_null())
        throw ValueError("optimizer " + cls_ + " weight_decay is not supported (use AdamW)");
      if (!value.is_null() && value != json(false))
        throw ValueError("optimizer argument " + key + "=" + value.dump() + " is not supported");
    }
  }

 private:
  std::string cls_;
  const json& config_;
  std::set<std::string> read_;
};

// The optimizer of `cls` from its config's options, those read and refused by one reader.
OptimizerPtr make(const std::string& cls, OptionReader& r) {
  if (cls == "SGD") {
    SGDOptions o;
    r.base_options(o);
    o.momentum = r.option("momentum", o.momentum);
    o.nesterov = r.option("nesterov", o.nesterov);
    r.refuse_the_rest();
    return SGD(o);
  }
  if (cls == "Adam" || cls == "AdamW") {
    AdamWOptions o;
    r.base_options(o);
    o.beta_1 = r.option("beta_1", o.beta_1);
    o.beta_2 = r.option("beta_2", o.beta_2);
    o.epsilon = r.option("epsilon", o.epsilon);
    if (cls == "AdamW") o.weight_decay = r.option("weight_decay", o.weight_decay);
    r.refuse_the_rest();
    if (cls == "Adam") return Adam(static_cast<const AdamOptions&>(o));
    return AdamW(o);
  }
  if (cls == "RMSprop") {
    RMSpropOptions o;
    r.base_options(o);
    o.rho = r.option("rho", o.rho);
    o.momentum = r.option("momentum", o.momentum);
    o.epsilon = r.option("epsilon", o.epsilon);
    o.centered = r.option("centered", o.centered);
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
  const json& config = j.at("config");
  if (!config.is_object())
    throw ValueError("optimizer " + cls + " config " + config.dump().substr(0, 120) + " is not an object");
  OptionReader reader(cls, config);
  return make(cls, reader);
}

}  // namespace lockstep::optimizers
