// The custom loop: strategy.run calling a Python function on each replica's thread, strategy.reduce,
// experimental_distribute_dataset, model(x, training=...), a loss's per-example values,
// optimizer.apply_gradients, compute_average_loss and metrics objects.
//
// The GIL: strategy.run releases it and each replica thread takes it to run its Python function;
// every binding such a function calls that computes or waits (ops, the model call, tape.gradient,
// apply_gradients' all-reduce) releases it again, so the replicas take turns in Python and run
// their C++ at once. A binding that waited for another replica while holding the GIL would
// deadlock the step.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "lockstep/data/input_context.hpp"
#include "lockstep/losses/loss.hpp"
#include "lockstep/metrics/metric.hpp"
#include "lockstep/metrics/metric_config.hpp"
#include "lockstep/optimizers/optimizer.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::python {

namespace {

// The Keras mask a tensor carries (Keras' backend.get_keras_mask: its _keras_mask), or undefined.
Tensor keras_mask(nb::handle t) {
  const nb::object mask = nb::getattr(t, "_keras_mask", nb::none());
  return mask.is_none() ? Tensor() : as_tensor(mask, "a tensor's _keras_mask");
}
using distribute::DistributedBatch;
using distribute::Strategy;

// One step's input from a distributed dataset (what iterating it gives Python).
struct PyDistributedBatch {
  std::shared_ptr<DistributedBatch> batch;
};

class PyDistributedIterator {
 public:
  explicit PyDistributedIterator(const Strategy::DistributedDataset& ds) : it_(start_pipeline(ds)) {}
  PyDistributedBatch next() {
    std::optional<DistributedBatch> b;
    {
      nb::gil_scoped_release release;
      b = it_->next();
    }
    if (!b) throw nb::stop_iteration();
    return PyDistributedBatch{std::make_shared<DistributedBatch>(std::move(*b))};
  }

 private:
  PipelinePtr<Strategy::DistributedIterator> it_;
};

// The GIL for a replica's Python function. PyGILState_Ensure makes a Python thread state for a
// thread that has none and the matching Release frees it again, which on a replica thread (all but
// replica 0, the caller's) would be every step. Instead the first step on such a thread keeps its
// thread state (one Ensure left unreleased) until the thread ends with its strategy, which the
// binding deletes with the GIL released (PyStrategy) so that the thread can take it to free it.
class ReplicaGil {
 public:
  ReplicaGil() {
    thread_local KeptThreadState kept;
    kept.keep();
    state_ = PyGILState_Ensure();
  }
  ~ReplicaGil() { PyGILState_Release(state_); }
  ReplicaGil(const ReplicaGil&) = delete;
  ReplicaGil& operator=(const ReplicaGil&) = delete;

 private:
  struct KeptThreadState {
    PyThreadState* state = nullptr;
    void keep() {
      if (state != nullptr || PyGILState_GetThisThreadState() != nullptr) return;  // kept, or a Python thread
      PyGILState_Ensure();
      state = PyEval_SaveThread();
    }
    ~KeptThreadState() {
#if PY_VERSION_HEX >= 0x030D0000
      const bool finalizing = Py_IsFinalizing();
#else
      const bool finalizing = _Py_IsFinalizing();
#endif
      if (state == nullptr || !Py_IsInitialized() || finalizing) return;  // then Python frees it itself
      PyEval_RestoreThread(state);
      PyGILState_Release(PyGILState_UNLOCKED);  // the last Release: frees it and releases the GIL
    }
  };
  PyGILState_STATE state_;
};

// fn(replica_index, slice) on every local replica, each on its own thread with the GIL taken
// there; slice: the replica's part of `batch` as a list of tensors, or None without a batch.
nb::list run_on_replicas(PyStrategy& s, nb::callable fn, const std::optional<PyDistributedBatch>& batch) {
  Strategy& strategy = *s.strategy;
  std::vector<nb::object> results(static_cast<std::size_t>(strategy.num_local_replicas()));
  const auto call = [&](int replica, const data::Element* slice) {
    const ReplicaGil gil;
    nb::object arg = slice ? nb::cast(*slice) : nb::none();
    results[static_cast<std::size_t>(replica)] = fn(replica, arg);
  };
  {
    // A replica's Python exception reaches the caller as it was (module.cpp's translator).
    nb::gil_scoped_release release;
    if (batch) {
      strategy.run([&](const data::Element& slice) {
        call(distribute::get_replica_context()->local_replica_id(), &slice);
        return 0;
      }, *batch->batch);
    } else {
      strategy.run_void([&](distribute::ReplicaContext& ctx) { call(ctx.local_replica_id(), nullptr); });
    }
  }
  nb::list out;
  for (auto& r : results) out.append(r);
  return out;
}

distribute::ReduceOp reduce_op(const std::string& name) {
  for (auto op : {distribute::ReduceOp::kSum, distribute::ReduceOp::kMean, distribute::ReduceOp::kMax,
                  distribute::ReduceOp::kMin})
    if (name == distribute::reduce_op_name(op)) return op;
  throw ValueError("tf.distribute.ReduceOp: lockstep has SUM, MEAN, MAX and MIN, not " + name);
}

// keras.metrics.<class_name>(**config): the table of metrics::deserialize makes it (and refuses
// an unknown class or option by name).
metrics::MetricPtr make_metric(const std::string& class_name, const std::string& config_text) {
  return metrics::deserialize({{"class_name", class_name}, {"config", nlohmann::json::parse(config_text)}});
}

void bind_strategy_loop(nb::module_& m) {
  nb::class_<PyDistributedBatch>(m, "DistributedBatch")
      .def_prop_ro("global_batch_size", [](const PyDistributedBatch& b) { return b.batch->global_size; });
  nb::class_<PyDistributedIterator>(m, "DistributedIterator")
      .def("__iter__", [](PyDistributedIterator& it) -> PyDistributedIterator& { return it; }, nb::rv_policy::reference)
      .def("__next__", &PyDistributedIterator::next);
  nb::class_<Strategy::DistributedDataset>(m, "DistributedDataset")
      .def("__iter__", [](const Strategy::DistributedDataset& ds) { return PyDistributedIterator(ds); });
  m.def("experimental_distribute_dataset", [](const PyStrategy& s, const data::Dataset& ds) {
    return s.strategy->experimental_distribute_dataset(ds);
  });
  nb::class_<data::InputContext>(m, "InputContext")
      .def_ro("num_input_pipelines", &data::InputContext::num_input_pipelines)
      .def_ro("input_pipeline_id", &data::InputContext::input_pipeline_id)
      .def_ro("num_replicas_in_sync", &data::InputContext::num_replicas_in_sync)
      .def("get_per_replica_batch_size", &data::InputContext::get_per_replica_batch_size, nb::arg("global_batch_size"));
  // fn(input_context) -> a dataset of per-replica batches, called here (once per worker).
  m.def("distribute_datasets_from_function", [](const PyStrategy& s, nb::callable fn) {
    return s.strategy->distribute_datasets_from_function(
        [&fn](const data::InputContext& ctx) { return nb::cast<data::Dataset>(fn(ctx)); });
  });
  m.def("run_on_replicas", &run_on_replicas, nb::arg("strategy"), nb::arg("fn"), nb::arg("batch") = nb::none());
  m.def("reduce", [](const PyStrategy& s, const std::string& op, nb::handle values, std::optional<int> axis) {
    const distribute::PerReplica<Tensor> per_replica(tensors_from_list(values, "tf.distribute.Strategy.reduce"));
    const auto o = reduce_op(op);
    nb::gil_scoped_release release;
    return s.strategy->reduce(o, per_replica, axis);
  });
  m.def("compute_average_loss", [](nb::handle per_example_loss, std::optional<std::int64_t> global_batch_size) {
    const Tensor t = as_tensor(per_example_loss, "tf.nn.compute_average_loss");
    nb::gil_scoped_release release;
    return global_batch_size ? distribute::compute_average_loss(t, *global_batch_size)
                             : distribute::compute_average_loss(t);
  }, nb::arg("per_example_loss"), nb::arg("global_batch_size") = nb::none());
  // tf.distribute.get_replica_context() inside strategy.run: (replica_id_in_sync_group,
  // num_replicas_in_sync) of this thread's replica, None on any other thread.
  m.def("replica_ids", []() -> std::optional<std::pair<int, int>> {
    const auto* ctx = distribute::get_replica_context();
    if (!ctx) return std::nullopt;
    const auto ids = ctx->ids();
    return std::make_pair(ids.replica_id_in_sync_group, ids.num_replicas_in_sync);
  });
  m.def("replica_all_reduce", [](const std::string& op, nb::handle value) {
    auto* ctx = distribute::get_replica_context();
    LOCKSTEP_CHECK(ctx != nullptr, "ReplicaContext.all_reduce: only inside strategy.run");
    const Tensor t = as_tensor(value, "tf.distribute.ReplicaContext.all_reduce");
    const auto o = reduce_op(op);
    nb::gil_scoped_release release;
    return ctx->all_reduce(o, t);
  });
}

void bind_model_loop(nb::module_& m) {
  // Keras' model(x): the output, carrying its Keras mask as Keras' tensors do (y_pred._keras_mask),
  // for the loss and metrics a custom loop hands it to.
  m.def("model_call", [](const Model& model, nb::handle x, bool training) {
    const Tensor t = as_tensor(x, "keras.Model.__call__");
    Model::Output o;
    {
      nb::gil_scoped_release release;
      o = model.call_with_mask(t, layers::CallContext{.training = training});
    }
    nb::object out = nb::cast(o.output);
    if (o.mask.defined()) nb::setattr(out, "_keras_mask", nb::cast(o.mask));
    return out;
  });
  m.def("trainable_variables", [](const Model& model) { return model.trainable_variables(); });
  m.def("non_trainable_variables", [](const Model& model) { return model.non_trainable_variables(); });
  m.def("variables", [](const Model& model) { return model.variables(); });
  // Keras 3's Loss.__call__: y_pred's own Keras mask (_keras_mask, as model_call sets it) leaves
  // the masked positions out, as fit does.
  m.def("loss_call", [](const losses::Loss& loss, nb::handle y_true, nb::handle y_pred, nb::handle sample_weight,
                        const std::string& reduction) {
    const Tensor t = as_tensor(y_true, "keras.losses y_true"), p = as_tensor(y_pred, "keras.losses y_pred");
    const Tensor w = sample_weight.is_none() ? Tensor() : as_tensor(sample_weight, "keras.losses sample_weight");
    const Tensor mask = keras_mask(y_pred);
    const losses::Reduction r = losses::reduction_from_name(reduction);
    nb::gil_scoped_release release;
    try {
      return loss(t, p, w, mask, r);
    } catch (const ValueError& e) {
      throw ValueError("loss '" + loss.name() + "': " + e.what());
    }
  }, nb::arg("loss"), nb::arg("y_true"), nb::arg("y_pred"), nb::arg("sample_weight").none(), nb::arg("reduction"));
  m.def("apply_gradients", [](optimizers::Optimizer& opt, nb::handle grads, const std::vector<Variable>& vars) {
    const std::vector<Tensor> g = tensors_from_list(grads, "keras.optimizers.Optimizer.apply_gradients");
    nb::gil_scoped_release release;
    opt.apply_gradients(g, vars);
  });
  m.def("optimizer_iterations", [](const optimizers::Optimizer& opt) { return opt.iterations(); });

  nb::class_<metrics::Metric>(m, "Metric")
      .def_prop_ro("name", &metrics::Metric::name)
      .def("update_state", [](metrics::Metric& metric, nb::handle a, nb::handle b, nb::handle w) {
        const Tensor ta = as_tensor(a, "keras.metrics update_state");
        const Tensor tb = b.is_none() ? Tensor() : as_tensor(b, "keras.metrics update_state");
        // Keras' sample_weight: none, or an array the metric weighs its values by; and y_pred's
        // Keras mask, which Keras' MeanMetricWrapper applies.
        const Tensor tw = w.is_none() ? Tensor() : as_tensor(w, "keras.metrics update_state sample_weight");
        const Tensor mask = b.is_none() ? Tensor() : keras_mask(b);
        nb::gil_scoped_release release;
        metric.update_state(ta, tb, tw, mask);
      }, nb::arg("y_true"), nb::arg("y_pred") = nb::none(), nb::arg("sample_weight") = nb::none())
      .def("result", &metrics::Metric::result)
      .def("reset_state", &metrics::Metric::reset_state)
      .def("get_config", [](const metrics::Metric& metric) { return metrics::serialize(metric).at("config").dump(); });
  m.def("make_metric", &make_metric, nb::arg("class_name"), nb::arg("config"));
}
}  // namespace

void bind_loop(nb::module_& m) {
  bind_strategy_loop(m);
  bind_model_loop(m);
}

}  // namespace lockstep::python
