// keras: layers (made through lockstep's layer registry from Keras-style arguments), Sequential,
// optimizers, losses, callbacks, compile / fit / evaluate / predict, and saved models.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "arrays.hpp"
#include "interrupt.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/initializers.hpp"
#include "lockstep/layers/layer_registry.hpp"
#include "lockstep/layers/preprocessing_layers.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/optimizers/optimizer_config.hpp"
#include "lockstep/optimizers/schedules.hpp"
#include "lockstep/training/callbacks.hpp"
#include "lockstep/training/progbar.hpp"
#include "lockstep/training/saved_model.hpp"
#include "lockstep/training/sequential.hpp"

namespace lockstep::python {

namespace {
using nlohmann::json;
using ModelPtr = std::shared_ptr<Model>;

// keras.layers.<class_name>(**config): the registered class's from_config, then every argument
// given is checked to be one the layer has (its get_config()) or one Keras has that lockstep
// fixes (keras_fixed: given as that value, or null), so that no argument is silently ignored.
layers::LayerPtr make_layer(const std::string& class_name, const std::string& config_text) {
  const auto cls = layers::find_layer_class(class_name);
  if (!cls) throw ValueError("lockstep does not support keras.layers." + class_name + " yet (it has " +
                             layers::layer_class_names() + ")");
  const json given = json::parse(config_text);
  layers::LayerPtr layer;
  try {
    layer = cls->from_config(given);  // a mistyped argument: the layer's config reader names it
  } catch (const json::exception& e) {
    throw ValueError("keras.layers." + class_name + ": " + e.what());
  }
  const json made = layer->get_config();
  for (const auto& [key, value] : given.items()) {
    if (made.contains(key)) continue;
    if (cls->keras_fixed.contains(key)) {
      if (value.is_null() || value == cls->keras_fixed.at(key)) continue;
      throw ValueError("keras.layers." + class_name + ": lockstep supports only " + key + "=" +
                       cls->keras_fixed.at(key).dump() + ", not " + value.dump());
    }
    if (value.is_null()) continue;  // Keras' "off"
    throw ValueError("keras.layers." + class_name + ": lockstep does not support the argument " + key + " yet");
  }
  return layer;
}

optimizers::OptimizerPtr make_optimizer(const std::string& class_name, const std::string& config_text) {
  return optimizers::deserialize({{"class_name", class_name}, {"config", json::parse(config_text)}});
}

// A schedule of keras.optimizers.schedules' built-in classes, as Python holds it: the C++ schedule
// its Keras serialisation describes, which the optimizer given it runs (on the host and in fit's step).
struct KerasSchedule {
  optimizers::Schedule rate;
};

losses::LossPtr make_loss(const std::string& name, bool from_logits) {
  if (name == "sparse_categorical_crossentropy") return losses::SparseCategoricalCrossentropy({from_logits});
  if (name == "categorical_crossentropy") return losses::CategoricalCrossentropy({from_logits});
  if (name == "binary_crossentropy") return losses::BinaryCrossentropy({from_logits});
  LOCKSTEP_CHECK(!from_logits, "loss '", name, "' has no from_logits argument");
  return losses::get(name);
}

// A model's inputs or outputs for Python: ("one" | "list" | "dict", names in flat order).
nb::tuple structure_tuple(const Structure& st) {
  const char* form = st.form == Structure::Form::kOne ? "one" : st.form == Structure::Form::kList ? "list" : "dict";
  return nb::make_tuple(form, st.names);
}

std::vector<Tensor> tensors_from_arrays(const std::vector<HostArray>& arrays, const char* what) {
  std::vector<Tensor> out;
  for (const auto& a : arrays) out.push_back(tensor_from_array(a, what));
  return out;
}

nb::list arrays_from_tensors(const std::vector<Tensor>& tensors) {
  nb::list out;
  for (const auto& t : tensors) out.append(array_from_tensor(t));
  return out;
}

nb::dict history_dict(const History& h) {
  nb::dict d;
  for (const auto& [key, values] : h.history) d[key.c_str()] = nb::cast(values);
  return d;
}

// A Python keras.callbacks.Callback subclass: fit's hooks call its methods with the GIL held
// (fit runs with it released); an exception it raises ends fit and reaches the caller. Whether it
// is async-safe is Python's answer (keras/callbacks.py's _async_safe: Keras 3's rule), read once,
// when fit is given it. A subclass of a built-in that overrides its hooks has that built-in as its
// base: fit tells the base its model and parameters, and the Python hooks it does not override,
// and its super() calls, run the base's (keras/callbacks.py's _NativeCallback).
class PythonCallback final : public Callback {
 public:
  PythonCallback(nb::object callback, bool async_safe, CallbackPtr base)
      : callback_(std::move(callback)), async_safe_(async_safe), base_(std::move(base)) {}
  bool async_safe() const override { return async_safe_; }
  ~PythonCallback() override {
    nb::gil_scoped_acquire acquire;
    callback_.reset();
  }
  void set_model(Model* model) override {
    Callback::set_model(model);
    if (base_) base_->set_model(model);
  }
  void set_params(const TrainParams& params) override {
    Callback::set_params(params);
    if (base_) base_->set_params(params);
    nb::gil_scoped_acquire acquire;
    nb::dict d;  // Keras' params
    d["epochs"] = params.epochs;
    d["steps"] = params.steps < 0 ? nb::none() : nb::object(nb::int_(params.steps));
    d["verbose"] = params.verbose;
    callback_.attr("set_params")(d);
  }
  void on_train_begin(const Logs& logs) override { call("on_train_begin", logs); }
  void on_train_end(const Logs& logs) override { call("on_train_end", logs); }
  void on_epoch_begin(int epoch, const Logs& logs) override { call("on_epoch_begin", logs, epoch); }
  void on_epoch_end(int epoch, const Logs& logs) override { call("on_epoch_end", logs, epoch); }
  void on_train_batch_begin(std::int64_t batch, const Logs& logs) override {
    call("on_train_batch_begin", logs, batch);
  }
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override { call("on_train_batch_end", logs, batch); }

 private:
  void call(const char* hook, const Logs& logs, std::optional<std::int64_t> index = std::nullopt) {
    nb::gil_scoped_acquire acquire;
    nb::dict d;
    for (const auto& [key, value] : logs) d[key.c_str()] = value;
    if (index) {
      callback_.attr(hook)(*index, d);
    } else {
      callback_.attr(hook)(d);
    }
  }
  nb::object callback_;
  bool async_safe_;
  CallbackPtr base_;
};

// A Python callable that C++ keeps (a schedule): called with the GIL, and let go of with it
// wherever its last owner drops it (fit's thread runs with the GIL released).
std::shared_ptr<nb::object> keep_python(nb::object fn) {
  return {new nb::object(std::move(fn)), [](nb::object* o) {
            nb::gil_scoped_acquire acquire;
            delete o;
          }};
}

void bind_callbacks(nb::module_& m) {
  // The hooks are bound for a Python subclass of a built-in (its super() calls and the hooks it
  // does not override); they run with the GIL released, as fit runs them.
  const auto released = nb::call_guard<nb::gil_scoped_release>();
  nb::class_<Callback>(m, "Callback")
      .def_prop_ro("async_safe", &Callback::async_safe)
      .def("on_train_begin", &Callback::on_train_begin, released)
      .def("on_train_end", &Callback::on_train_end, released)
      .def("on_epoch_begin", &Callback::on_epoch_begin, released)
      .def("on_epoch_end", &Callback::on_epoch_end, released)
      .def("on_train_batch_begin", &Callback::on_train_batch_begin, released)
      .def("on_train_batch_end", &Callback::on_train_batch_end, released);
  m.def("python_callback", [](nb::object callback, bool async_safe, CallbackPtr base) {
    return CallbackPtr(std::make_shared<PythonCallback>(std::move(callback), async_safe, std::move(base)));
  }, nb::arg("callback"), nb::arg("async_safe"), nb::arg("base").none());
  m.def("model_checkpoint", [](std::string filepath, std::string monitor, int verbose, bool save_best_only,
                               bool save_weights_only, std::string mode, std::int64_t save_freq_batches) {
    return CallbackPtr(std::make_shared<ModelCheckpoint>(ModelCheckpointOptions{
        .filepath = std::move(filepath), .monitor = std::move(monitor), .verbose = verbose,
        .save_best_only = save_best_only, .save_weights_only = save_weights_only, .mode = std::move(mode),
        .save_freq = {save_freq_batches}}));
  });
  m.def("tensorboard", [](std::string log_dir, int histogram_freq, std::int64_t update_freq_batches, bool write_graph) {
    return CallbackPtr(std::make_shared<TensorBoard>(TensorBoardOptions{.log_dir = std::move(log_dir),
                                                                        .histogram_freq = histogram_freq,
                                                                        .update_freq = {update_freq_batches},
                                                                        .write_model_summary = write_graph}));
  });
  m.def("early_stopping", [](std::string monitor, double min_delta, int patience, int verbose, std::string mode,
                             std::optional<double> baseline, bool restore_best_weights, int start_from_epoch) {
    return CallbackPtr(std::make_shared<EarlyStopping>(EarlyStoppingOptions{
        .monitor = std::move(monitor), .min_delta = min_delta, .patience = patience, .verbose = verbose,
        .mode = std::move(mode), .baseline = baseline, .restore_best_weights = restore_best_weights,
        .start_from_epoch = start_from_epoch}));
  });
  m.def("backup_and_restore", [](std::string backup_dir, std::int64_t save_freq_batches, bool delete_checkpoint) {
    return CallbackPtr(std::make_shared<BackupAndRestore>(BackupAndRestoreOptions{
        .backup_dir = std::move(backup_dir), .save_freq = {save_freq_batches}, .delete_checkpoint = delete_checkpoint}));
  });
  m.def("csv_logger", [](std::string filename, std::string separator, bool append) {
    LOCKSTEP_CHECK(separator.size() == 1, "CSVLogger: separator must be one character, not '", separator, "'");
    return CallbackPtr(std::make_shared<CSVLogger>(std::move(filename), separator[0], append));
  });
  m.def("reduce_lr_on_plateau", [](std::string monitor, double factor, int patience, int verbose, std::string mode,
                                   double min_delta, int cooldown, double min_lr) {
    return CallbackPtr(std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{
        .monitor = std::move(monitor), .factor = factor, .patience = patience, .verbose = verbose,
        .mode = std::move(mode), .min_delta = min_delta, .cooldown = cooldown, .min_lr = min_lr}));
  });
  // schedule(epoch, lr) is Python's (keras/callbacks.py checks what it returns); an exception it
  // raises ends fit and reaches the caller as it was raised.
  m.def("learning_rate_scheduler", [](nb::callable schedule, int verbose) {
    auto fn = keep_python(std::move(schedule));
    return CallbackPtr(std::make_shared<LearningRateScheduler>(
        [fn](int epoch, double lr) {
          nb::gil_scoped_acquire acquire;
          return nb::cast<double>((*fn)(epoch, lr));
        },
        verbose));
  });
  m.def("terminate_on_nan", [] { return CallbackPtr(std::make_shared<TerminateOnNaN>()); });
  m.def("set_stdout_redraws", &set_stdout_redraws, nb::arg("redraws"),
        "Whether fit's progress bar redraws in place on stdout (True in a Jupyter kernel)");
}

// The GIL is released while C++ trains, evaluates or predicts (callbacks and schedules written
// in Python take it back for their calls); what the call returns is converted with it held.
template <class F>
auto without_gil(F&& call) {
  nb::gil_scoped_release release;
  return call();
}

// fit in each of its forms: Ctrl-C stops it at a step boundary (StopOnSigint) and raises
// KeyboardInterrupt; its History comes back as (epoch, history).
template <class F>
nb::tuple run_fit(F&& fit) {
  const StopOnSigint stop_on_sigint;
  const History h = without_gil(std::forward<F>(fit));
  return nb::make_tuple(h.epoch, history_dict(h));
}

// evaluate's sample_weight argument: an array (the package makes it float32), or none.
Tensor evaluate_weights(const std::optional<HostArray>& w) {
  return w ? tensor_from_array(*w, "evaluate sample_weight") : Tensor();
}

// evaluate's sample_weight as one array per output (a model of several), or none.
std::vector<Tensor> evaluate_output_weights(const std::optional<std::vector<HostArray>>& w) {
  return w ? tensors_from_arrays(*w, "evaluate sample_weight") : std::vector<Tensor>();
}

void bind_fit(nb::class_<Model>& model) {
  nb::class_<FitOptions>(model, "FitOptions")
      .def(nb::init<>())
      .def_rw("epochs", &FitOptions::epochs)
      .def_rw("steps_per_epoch", &FitOptions::steps_per_epoch)
      .def_rw("batch_size", &FitOptions::batch_size)
      .def_rw("validation_data", &FitOptions::validation_data)
      .def_rw("validation_split", &FitOptions::validation_split)
      .def_rw("validation_steps", &FitOptions::validation_steps)
      .def_rw("shuffle", &FitOptions::shuffle)
      .def_rw("initial_epoch", &FitOptions::initial_epoch)
      .def_rw("verbose", &FitOptions::verbose)
      .def_rw("callbacks", &FitOptions::callbacks)
      .def_rw("class_weight", &FitOptions::class_weight)
      // Keras' sample_weight: an array (the package makes it float32), copied in when set.
      .def("set_sample_weight", [](FitOptions& o, const HostArray& w) {
        o.sample_weight = tensor_from_array(w, "fit sample_weight");
      })
      // One array per output of a model of several (Keras' list or dict), in the outputs' order.
      .def("set_sample_weights", [](FitOptions& o, const std::vector<HostArray>& w) {
        o.sample_weights = tensors_from_arrays(w, "fit sample_weight");
      });
  // fit, evaluate and predict each take their data in several forms; the data is read into tensors
  // with the GIL held, then the call runs with it released (below).
  model
      .def("fit_dataset", [](Model& m, const data::Dataset& ds, const FitOptions& o) {
        return run_fit([&] { return m.fit(ds, o); });
      })
      .def("fit_arrays", [](Model& m, const HostArray& x, const HostArray& y, const FitOptions& o) {
        const Tensor tx = tensor_from_array(x, "fit x"), ty = tensor_from_array(y, "fit y");
        return run_fit([&] { return m.fit(tx, ty, o); });
      })
      // Several inputs and outputs: one array per input and per target, in the structures' flat order.
      .def("fit_arrays_list", [](Model& m, const std::vector<HostArray>& xs, const std::vector<HostArray>& ys,
                                 const FitOptions& o) {
        const std::vector<Tensor> tx = tensors_from_arrays(xs, "fit x"), ty = tensors_from_arrays(ys, "fit y");
        return run_fit([&] { return m.fit(tx, ty, o); });
      })
      .def("evaluate_arrays_list", [](Model& m, const std::vector<HostArray>& xs, const std::vector<HostArray>& ys,
                                      std::int64_t batch_size, std::int64_t steps, int verbose,
                                      const std::vector<CallbackPtr>& callbacks,
                                      const std::optional<HostArray>& sample_weight,
                                      const std::optional<std::vector<HostArray>>& sample_weights) {
        const std::vector<Tensor> tx = tensors_from_arrays(xs, "evaluate x");
        const std::vector<Tensor> ty = tensors_from_arrays(ys, "evaluate y");
        const EvaluateOptions o{.batch_size = batch_size, .steps = steps, .verbose = verbose, .callbacks = callbacks,
                                .sample_weight = evaluate_weights(sample_weight),
                                .sample_weights = evaluate_output_weights(sample_weights)};
        return without_gil([&] { return m.evaluate(tx, ty, o); });
      }, nb::arg("xs"), nb::arg("ys"), nb::arg("batch_size"), nb::arg("steps"), nb::arg("verbose"),
         nb::arg("callbacks"), nb::arg("sample_weight").none() = nb::none(),
         nb::arg("sample_weights").none() = nb::none())
      .def("predict_arrays_list", [](Model& m, const std::vector<HostArray>& xs, std::int64_t batch_size,
                                     std::int64_t steps) {
        const std::vector<Tensor> tx = tensors_from_arrays(xs, "predict x");
        return arrays_from_tensors(
            without_gil([&] { return m.predict(tx, PredictOptions{.batch_size = batch_size, .steps = steps}); }));
      })
      .def("predict_dataset_outputs", [](Model& m, const data::Dataset& ds, std::int64_t steps) {
        return arrays_from_tensors(without_gil([&] { return m.predict_outputs(ds, PredictOptions{.steps = steps}); }));
      })
      .def("evaluate_dataset", [](Model& m, const data::Dataset& ds, std::int64_t steps, int verbose,
                                  const std::vector<CallbackPtr>& callbacks,
                                  const std::optional<HostArray>& sample_weight,
                                  const std::optional<std::vector<HostArray>>& sample_weights) {
        const EvaluateOptions o{.steps = steps, .verbose = verbose, .callbacks = callbacks,
                                .sample_weight = evaluate_weights(sample_weight),
                                .sample_weights = evaluate_output_weights(sample_weights)};
        return without_gil([&] { return m.evaluate(ds, o); });
      }, nb::arg("dataset"), nb::arg("steps"), nb::arg("verbose"), nb::arg("callbacks"),
         nb::arg("sample_weight").none() = nb::none(), nb::arg("sample_weights").none() = nb::none())
      .def("evaluate_arrays", [](Model& m, const HostArray& x, const HostArray& y, std::int64_t batch_size,
                                 std::int64_t steps, int verbose, const std::vector<CallbackPtr>& callbacks,
                                 const std::optional<HostArray>& sample_weight) {
        const Tensor tx = tensor_from_array(x, "evaluate x"), ty = tensor_from_array(y, "evaluate y");
        const EvaluateOptions o{.batch_size = batch_size, .steps = steps, .verbose = verbose, .callbacks = callbacks,
                                .sample_weight = evaluate_weights(sample_weight)};
        return without_gil([&] { return m.evaluate(tx, ty, o); });
      }, nb::arg("x"), nb::arg("y"), nb::arg("batch_size"), nb::arg("steps"), nb::arg("verbose"),
         nb::arg("callbacks"), nb::arg("sample_weight").none() = nb::none())
      .def("predict_dataset", [](Model& m, const data::Dataset& ds, std::int64_t steps) {
        return array_from_tensor(without_gil([&] { return m.predict(ds, PredictOptions{.steps = steps}); }));
      })
      .def("predict_arrays", [](Model& m, const HostArray& x, std::int64_t batch_size, std::int64_t steps) {
        const Tensor tx = tensor_from_array(x, "predict x");
        return array_from_tensor(
            without_gil([&] { return m.predict(tx, PredictOptions{.batch_size = batch_size, .steps = steps}); }));
      });
}
}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<layers::Layer>(m, "Layer")
      .def_prop_ro("name", &layers::Layer::name)
      .def_prop_ro("class_name", &layers::Layer::class_name)
      .def_prop_ro("keras_positional_call", &layers::Layer::keras_positional_call)
      .def_prop_ro("call_takes_mask", &layers::Layer::call_takes_mask)
      .def_prop_ro("variables", [](const layers::Layer& l) { return l.variables(); })
      .def_prop_ro("trainable_variables", [](const layers::Layer& l) { return l.trainable_variables(); })
      .def_prop_ro("non_trainable_variables", [](const layers::Layer& l) { return l.non_trainable_variables(); })
      .def_prop_rw("trainable", &layers::Layer::trainable, &layers::Layer::set_trainable)
      .def("get_config", [](const layers::Layer& l) { return l.get_config().dump(); });
  m.def("make_layer", &make_layer, nb::arg("class_name"), nb::arg("config_json"));
  // Keras' Normalization.adapt on batches of host arrays (one array: one batch).
  m.def("adapt_normalization", [](layers::Layer& l, const std::vector<HostArray>& batches) {
    auto* norm = dynamic_cast<layers::NormalizationLayer*>(&l);
    LOCKSTEP_CHECK(norm != nullptr, "adapt: layer '", l.name(), "' (", l.class_name(), ") has no adapt()");
    std::vector<Tensor> tensors;
    for (const auto& b : batches) tensors.push_back(tensor_from_array(b, "adapt data"));
    without_gil([&] { norm->adapt(tensors); });
  });
  m.def("input_layer", [](const std::vector<std::int64_t>& shape) { return layers::Input(Shape(shape)); });
  m.def("layer_class_names", &layers::layer_class_names);
  m.def("has_layer_class", [](const std::string& name) { return layers::find_layer_class(name).has_value(); });

  // learning_rate is written as Keras' optimizer.learning_rate = x is (a callback's, between
  // epochs): TypeError, Keras 3's, for an optimizer made with a schedule.
  nb::class_<optimizers::Optimizer>(m, "Optimizer")
      .def_prop_rw("learning_rate", &optimizers::Optimizer::current_learning_rate,
                   &optimizers::Optimizer::set_learning_rate);
  nb::class_<KerasSchedule>(m, "Schedule").def("__call__", [](const KerasSchedule& s, std::int64_t step) {
    LOCKSTEP_CHECK(step >= 0, "a learning-rate schedule's step must be >= 0, got ", step);
    return s.rate(step);
  });
  // ValueError naming the class or argument lockstep lacks, or an argument out of its range.
  m.def("make_schedule", [](const std::string& keras_json) {
    return KerasSchedule{optimizers::schedules::deserialize(json::parse(keras_json))};
  });
  m.def("make_optimizer", &make_optimizer, nb::arg("class_name"), nb::arg("config_json"));
  nb::class_<losses::Loss>(m, "Loss").def_prop_ro("name", &losses::Loss::name);
  m.def("make_loss", &make_loss, nb::arg("name"), nb::arg("from_logits") = false);
  bind_callbacks(m);

  auto model = nb::class_<Model>(m, "Model");
  model.def_prop_ro("name", &Model::name)
      .def_prop_ro("built", &Model::built)
      .def_prop_ro("compiled", &Model::compiled)
      .def_prop_ro("layers", [](const Model& mo) { return mo.layers(); })
      .def_prop_ro("metrics_names", [](const Model& mo) {
        std::vector<std::string> names{"loss"};
        for (const auto& metric : mo.metrics()) names.push_back(metric.log_name);
        return names;
      })
      .def_prop_ro("input_structure", [](const Model& mo) { return structure_tuple(mo.input_structure()); })
      .def_prop_ro("output_structure", [](const Model& mo) { return structure_tuple(mo.output_structure()); })
      .def_prop_ro("input_shape", [](const Model& mo) { return mo.input_shape().dims(); })
      .def_prop_ro("output_shape", [](const Model& mo) { return mo.output_shape().dims(); })
      .def_prop_ro("optimizer", &Model::optimizer)
      .def_prop_rw("trainable", &Model::trainable, &Model::set_trainable)
      .def_rw("stop_training", &Model::stop_training)
      .def_prop_rw("steps_per_execution", &Model::steps_per_execution, &Model::set_steps_per_execution)
      .def("build", [](Model& mo, const std::vector<std::int64_t>& shape) { mo.build(Shape(shape)); })
      .def("summary", &Model::summary)
      .def("count_params", &Model::count_params)
      .def("set_seed", &Model::set_seed)
      // Keras' metrics=[...]: names and metric objects, names made as Model::compile makes them (by
      // their output's loss).
      .def("compile", [](Model& mo, const optimizers::OptimizerPtr& opt, const losses::LossPtr& loss,
                         std::vector<Model::MetricArg> given) { mo.compile(opt, loss, std::move(given)); })
      // A model of several outputs: losses, metrics (names and objects) and loss weights by output
      // name ("" for one loss of every output).
      .def("compile_outputs", [](Model& mo, const optimizers::OptimizerPtr& opt,
                                 const std::map<std::string, losses::LossPtr>& losses,
                                 std::map<std::string, std::vector<Model::MetricArg>> given,
                                 const std::map<std::string, double>& loss_weights) {
        mo.compile(opt, losses, std::move(given), loss_weights);
      })
      // Keras' weighted_metrics of one output ("" for a model of one): names and metric objects,
      // in their order.
      .def("add_weighted_metrics", [](Model& mo, std::vector<Model::MetricArg> given, const std::string& output) {
        mo.add_weighted_metrics(std::move(given), output);
      }, nb::arg("metrics"), nb::arg("output") = "")
      .def_prop_rw(
          "jit_compile", [](const Model& mo) { return std::string(jit_compile_name(mo.jit_compile())); },
          [](Model& mo, const std::string& mode) { mo.set_jit_compile(parse_jit_compile(mode)); })
      .def_prop_ro("jit_compile_reason", &Model::jit_compile_reason)
      .def("save", [](Model& mo, const std::string& path) { save_model(mo, path); })
      .def("save_weights", [](const Model& mo, const std::string& path) { save_weights(mo, path); })
      .def("load_weights", [](Model& mo, const std::string& path) { load_weights(mo, path); });
  bind_fit(model);

  m.def("sequential", [](const std::vector<layers::LayerPtr>& layers, const std::string& name) {
    return ModelPtr(std::make_shared<Sequential>(layers, name));
  });
  m.def("sequential_add", [](Model& mo, const layers::LayerPtr& layer) {
    auto* seq = dynamic_cast<Sequential*>(&mo);
    LOCKSTEP_CHECK(seq != nullptr, "add: model '", mo.name(), "' is not a Sequential");
    seq->add(layer);
  });
  m.def("load_model", [](const std::string& path) { return ModelPtr(load_model(path)); });
  m.def("set_random_seed", &set_random_seed, nb::arg("seed"));
}

}  // namespace lockstep::python
