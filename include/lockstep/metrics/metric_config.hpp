#pragma once
// Keras' metric identifiers: a name as compile(metrics=[...]) takes it ("accuracy", "mae",
// "top_k_categorical_accuracy", "TopKCategoricalAccuracy") or a serialised object,
// {"module": "keras.metrics", "class_name": "TopKCategoricalAccuracy", "config": {"name": ...,
// "dtype": "float32", "k": 5}} (keras.metrics.serialize / deserialize): what compile, .keras
// compile configs and Python's keras.metrics classes hand over. One table of lockstep's metrics,
// with their Keras names, for all of them.
#include <string>

#include <nlohmann/json.hpp>

#include "lockstep/metrics/metric.hpp"

namespace lockstep::metrics {

/// The metric a Keras name makes, named as given (Keras' compile names a metric by the string it
/// was given). "accuracy" and "acc" (any case) take the accuracy that fits the loss's targets.
/// ValueError naming an unknown name and listing the names lockstep has.
MetricPtr get(const std::string& name, const std::string& loss_name);
/// Keras' serialised object: module, class_name, config {name, dtype "float32", k / threshold}.
/// ValueError for a metric Keras has no class for (a class of the user's own, AccuracyByShape).
nlohmann::json serialize(const Metric& metric);
/// A metric from a serialised object, or from a name as get() makes it. ValueError naming an
/// unknown class or name (and listing lockstep's); "metric <class>: argument <key>=<value> ..." for
/// a config option the class has not (unless Keras' "off": null or false), or one out of range:
/// k not a positive integer, a threshold not a finite number, from_sorted_ids true, a dtype other
/// than float32.
MetricPtr deserialize(const nlohmann::json& j, const std::string& loss_name = "");
/// What compile was given for this metric, as a .keras compile config lists it: its name where
/// get(name, loss_name) makes the same metric (Keras keeps metrics=["accuracy"] as given), else
/// serialize's object; the name alone for a metric Keras has no class for (compile's "accuracy"
/// picked by shapes is the string "accuracy", as Keras writes it).
nlohmann::json identifier(const Metric& metric, const std::string& loss_name);

}  // namespace lockstep::metrics
