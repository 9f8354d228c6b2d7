#include "lockstep/metrics/metric_config.hpp"

#include <algorithm>
#include <functional>
#include <vector>

#include "lockstep/core/error.hpp"

namespace lockstep::metrics {

namespace {
using nlohmann::json;

// A config's options, read and checked by name: the one place a metric's config is interpreted.
class Options {
 public:
  Options(std::string cls, json config) : cls_(std::move(cls)), config_(std::move(config)) {}
  // config[key] as a positive integer, or `otherwise` where absent or null.
  std::int64_t k(std::int64_t otherwise) const {
    const json* v = find("k");
    if (!v) return otherwise;
    LOCKSTEP_CHECK(v->is_number_integer() && v->get<std::int64_t>() >= 1, cls_, ": k must be a positive integer, got ",
                   v->dump());
    return v->get<std::int64_t>();
  }
  double threshold(double otherwise) const {
    const json* v = find("threshold");
    if (!v) return otherwise;
    LOCKSTEP_CHECK(v->is_number(), cls_, ": threshold must be a finite number, got ", v->dump());
    return v->get<double>();
  }
  void refuse_sorted_ids() const {
    const json* v = find("from_sorted_ids");
    LOCKSTEP_CHECK(!v || *v == json(false), cls_, ": from_sorted_ids=", v ? v->dump() : "",
                   " is not supported (y_pred holds a score per class)");
  }

 private:
  const json* find(const char* key) const {
    const auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string cls_;
  json config_;
};

// One metric class: Keras' class name, the names compile takes for it (the first its default
// name), the config keys it has beside name and dtype, and its maker.
struct Kind {
  const char* class_name;
  std::vector<std::string> names;
  std::vector<std::string> options;
  std::function<MetricPtr(const std::string& name, const Options& options)> make;
};

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> table = {
      {"Accuracy", {"accuracy"}, {}, [](const std::string& n, const Options&) { return std::make_shared<Accuracy>(n); }},
      {"BinaryAccuracy", {"binary_accuracy"}, {"threshold"},
       [](const std::string& n, const Options& o) { return std::make_shared<BinaryAccuracy>(n, o.threshold(0.5)); }},
      {"CategoricalAccuracy", {"categorical_accuracy"}, {},
       [](const std::string& n, const Options&) { return std::make_shared<CategoricalAccuracy>(n); }},
      {"SparseCategoricalAccuracy", {"sparse_categorical_accuracy"}, {},
       [](const std::string& n, const Options&) { return std::make_shared<SparseCategoricalAccuracy>(n); }},
      {"TopKCategoricalAccuracy", {"top_k_categorical_accuracy"}, {"k"},
       [](const std::string& n, const Options& o) { return std::make_shared<TopKCategoricalAccuracy>(o.k(5), n); }},
      {"SparseTopKCategoricalAccuracy", {"sparse_top_k_categorical_accuracy"}, {"k", "from_sorted_ids"},
       [](const std::string& n, const Options& o) {
         o.refuse_sorted_ids();
         return std::make_shared<SparseTopKCategoricalAccuracy>(o.k(5), n);
       }},
      {"MeanAbsoluteError", {"mean_absolute_error", "mae", "MAE"}, {},
       [](const std::string& n, const Options&) { return std::make_shared<MeanAbsoluteError>(n); }},
      {"MeanSquaredError", {"mean_squared_error", "mse", "MSE"}, {},
       [](const std::string& n, const Options&) { return std::make_shared<MeanSquaredError>(n); }},
      {"Mean", {"mean"}, {}, [](const std::string& n, const Options&) { return std::make_shared<Mean>(n); }},
  };
  return table;
}

std::string joined(const std::function<void(std::vector<std::string>&, const Kind&)>& pick) {
  std::vector<std::string> all;
  for (const Kind& k : kinds()) pick(all, k);
  std::string out;
  for (std::size_t i = 0; i < all.size(); ++i) out += (i ? ", " : "") + all[i];
  return out;
}

const Kind* find_class(const std::string& cls) {
  for (const Kind& k : kinds())
    if (cls == k.class_name) return &k;
  return nullptr;
}

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Keras 3 (trainers/compile_utils.get_metric) picks "accuracy"'s class by the shapes of the first
// batch: y_pred's last dim 1 -> binary_accuracy; labels of lower rank than y_pred, or a last dim of
// 1 against several classes -> sparse_categorical_accuracy; else categorical_accuracy. lockstep
// picks at compile by the loss, whose targets have those shapes: binary crossentropy's a value per
// output, sparse categorical crossentropy's labels, categorical crossentropy's one-hot rows. They
// part for binary crossentropy over several outputs per example (multi-label), which Keras scores
// as categorical_accuracy and lockstep value by value. Any other loss keeps Accuracy (a threshold
// at 0.5 for one output, else argmax against one-hot rows or labels).
MetricPtr accuracy_for(const std::string& name, const std::string& loss_name) {
  if (loss_name == "sparse_categorical_crossentropy") return std::make_shared<SparseCategoricalAccuracy>(name);
  if (loss_name == "binary_crossentropy") return std::make_shared<BinaryAccuracy>(name);
  if (loss_name == "categorical_crossentropy") return std::make_shared<CategoricalAccuracy>(name);
  return std::make_shared<Accuracy>(name);
}
}  // namespace

MetricPtr get(const std::string& name, const std::string& loss_name) {
  if (lower(name) == "accuracy" || lower(name) == "acc") return accuracy_for(name, loss_name);
  for (const Kind& k : kinds()) {
    if (name == k.class_name || std::find(k.names.begin(), k.names.end(), name) != k.names.end())
      return k.make(name, Options(k.class_name, json::object()));
  }
  throw ValueError("unknown metric '" + name + "': lockstep has acc, " + joined([](auto& all, const Kind& k) {
                     all.insert(all.end(), k.names.begin(), k.names.end());
                   }) + " (or the class names)");
}

json serialize(const Metric& metric) {
  const std::string cls = metric.class_name();
  LOCKSTEP_CHECK(!cls.empty(), "metrics::serialize: metric '", metric.name(),
                 "' is a class of the user's own, which Keras has no config for");
  json config = {{"name", metric.name()}, {"dtype", "float32"}};
  for (const auto& [key, value] : metric.options()) {
    if (key == "k") config[key] = static_cast<std::int64_t>(value);
    else config[key] = value;
  }
  return {{"module", "keras.metrics"}, {"class_name", cls}, {"config", config}, {"registered_name", nullptr}};
}

MetricPtr deserialize(const json& j, const std::string& loss_name) {
  if (j.is_string()) return get(j.get<std::string>(), loss_name);
  LOCKSTEP_CHECK(j.is_object() && j.contains("class_name") && j.at("class_name").is_string(),
                 "a metric is a name or Keras' {\"class_name\": ..., \"config\": ...}, not ", j.dump().substr(0, 120));
  const std::string cls = j.at("class_name").get<std::string>();
  const Kind* kind = find_class(cls);
  LOCKSTEP_CHECK(kind != nullptr, "lockstep does not support keras.metrics.", cls, " yet (it has ",
                 joined([](auto& all, const Kind& k) { all.push_back(k.class_name); }), ")");
  const json config = j.value("config", json::object());
  LOCKSTEP_CHECK(config.is_object(), cls, ": config ", config.dump().substr(0, 120), " is not an object");
  for (const auto& [key, value] : config.items()) {
    if (key == "name") {
      LOCKSTEP_CHECK(value.is_string(), cls, ": name must be a string, got ", value.dump());
    } else if (key == "dtype") {
      LOCKSTEP_CHECK(value.is_null() || value == json("float32"), cls, ": dtype ", value.dump(),
                     " is not supported (metrics keep float32 results)");
    } else {
      LOCKSTEP_CHECK(std::find(kind->options.begin(), kind->options.end(), key) != kind->options.end(), cls,
                     ": config option '", key, "' is not supported");
    }
  }
  const std::string name = config.contains("name") ? config.at("name").get<std::string>() : kind->names.front();
  return kind->make(name, Options(cls, config));
}

json identifier(const Metric& metric, const std::string& loss_name) {
  if (metric.class_name().empty()) return metric.name();
  json object = serialize(metric);
  try {
    if (serialize(*get(metric.name(), loss_name)) == object) return metric.name();
  } catch (const ValueError&) {  // a name no string makes: the object alone says what it is
  }
  return object;
}

}  // namespace lockstep::metrics
