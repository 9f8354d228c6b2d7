#include "lockstep/metrics/metric_config.hpp"

#include <algorithm>
#include <functional>
#include <vector>

#include "lockstep/core/error.hpp"
#include "nn/config_reader.hpp"

namespace lockstep::metrics {

namespace {
using nlohmann::json;

using detail::ConfigReader;

// One metric class: Keras' class name, the names compile takes for it (the first its default
// name), and its maker, which reads the options the class takes beside name and dtype (the reads
// are the list: deserialize refuses what they leave).
struct Kind {
  const char* class_name;
  std::vector<std::string> names;
  std::function<MetricPtr(const std::string& name, ConfigReader& options)> make;
};

// Keras' k: a positive integer, 5 where unset.
std::int64_t k_of(ConfigReader& r) { return r.integer("k", 5, 1); }

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> table = {
      {"Accuracy", {"accuracy"}, [](const std::string& n, ConfigReader&) { return std::make_shared<Accuracy>(n); }},
      {"BinaryAccuracy", {"binary_accuracy"},
       [](const std::string& n, ConfigReader& r) {
         return std::make_shared<BinaryAccuracy>(n, r.number("threshold", 0.5));
       }},
      {"CategoricalAccuracy", {"categorical_accuracy"},
       [](const std::string& n, ConfigReader&) { return std::make_shared<CategoricalAccuracy>(n); }},
      {"SparseCategoricalAccuracy", {"sparse_categorical_accuracy"},
       [](const std::string& n, ConfigReader&) { return std::make_shared<SparseCategoricalAccuracy>(n); }},
      {"TopKCategoricalAccuracy", {"top_k_categorical_accuracy"},
       [](const std::string& n, ConfigReader& r) { return std::make_shared<TopKCategoricalAccuracy>(k_of(r), n); }},
      {"SparseTopKCategoricalAccuracy", {"sparse_top_k_categorical_accuracy"},
       [](const std::string& n, ConfigReader& r) {
         r.refuse("from_sorted_ids", "y_pred holds a score per class");
         return std::make_shared<SparseTopKCategoricalAccuracy>(k_of(r), n);
       }},
      {"MeanAbsoluteError", {"mean_absolute_error", "mae", "MAE"},
       [](const std::string& n, ConfigReader&) { return std::make_shared<MeanAbsoluteError>(n); }},
      {"MeanSquaredError", {"mean_squared_error", "mse", "MSE"},
       [](const std::string& n, ConfigReader&) { return std::make_shared<MeanSquaredError>(n); }},
      {"Mean", {"mean"}, [](const std::string& n, ConfigReader&) { return std::make_shared<Mean>(n); }},
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
// as categorical_accuracy and lockstep value by value. Any other loss takes AccuracyByShape, which
// picks by the shapes as Keras does. keras.metrics.Accuracy (exact equality) is no "accuracy".
MetricPtr accuracy_for(const std::string& name, const std::string& loss_name) {
  if (loss_name == "sparse_categorical_crossentropy") return std::make_shared<SparseCategoricalAccuracy>(name);
  if (loss_name == "binary_crossentropy") return std::make_shared<BinaryAccuracy>(name);
  if (loss_name == "categorical_crossentropy") return std::make_shared<CategoricalAccuracy>(name);
  return std::make_shared<AccuracyByShape>(name);
}
}  // namespace

MetricPtr get(const std::string& name, const std::string& loss_name) {
  if (lower(name) == "accuracy" || lower(name) == "acc") return accuracy_for(name, loss_name);
  for (const Kind& k : kinds()) {
    if (name != k.class_name && std::find(k.names.begin(), k.names.end(), name) == k.names.end()) continue;
    const json none = json::object();
    ConfigReader defaults(std::string("metric ") + k.class_name, none);
    return k.make(name, defaults);
  }
  throw ValueError("unknown metric '" + name + "': lockstep has acc, " + joined([](auto& all, const Kind& k) {
                     all.insert(all.end(), k.names.begin(), k.names.end());
                   }) + " (or the class names)");
}

json serialize(const Metric& metric) {
  const std::string cls = metric.class_name();
  LOCKSTEP_CHECK(!cls.empty(), "metrics::serialize: metric '", metric.name(),
                 "' has no Keras class (a class of the user's own, or compile's \"accuracy\" picked by shapes, which "
                 "Keras keeps as the string)");
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
  ConfigReader r("metric " + cls, config);
  const std::string name = r.string("name", kind->names.front());
  if (const std::string dtype = r.string("dtype", "float32"); dtype != "float32")
    r.fail("dtype", dtype, "is not supported (metrics keep float32 results)");
  MetricPtr metric = kind->make(name, r);
  r.refuse_the_rest();
  return metric;
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
