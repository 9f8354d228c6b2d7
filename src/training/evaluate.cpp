// Model::evaluate and Model::predict: a pass over the data through the replicas, no update.
#include <memory>

#include "lockstep/training/model.hpp"
#include "lockstep/training/progbar.hpp"
#include "training/replica_slices.hpp"

namespace lockstep {
using detail::CallbackList;
using detail::ReplicaNumbers;
using detail::run_on_slices;

Logs Model::evaluate_impl(const data::Dataset& dataset, std::int64_t steps, const std::vector<CallbackPtr>& callbacks,
                          int verbose) {
  check_compiled("evaluate");
  const std::int64_t card = dataset.cardinality();
  LOCKSTEP_CHECK(steps > 0 || card != data::kInfiniteCardinality,
                 "evaluate: the dataset is infinite (repeat()), so steps must be given");
  CallbackList cbs{callbacks};
  cbs.each([&](Callback& c) { c.set_model(this); });
  reset_metrics();
  Logs logs;
  cbs.each([&](Callback& c) { c.on_test_begin(logs); });
  auto it = dataset.make_iterator();
  const std::int64_t total = steps > 0 ? steps : card;
  std::unique_ptr<Progbar> bar;
  if (verbose == 1 && (!strategy_ || strategy_->is_chief())) bar = std::make_unique<Progbar>(total);
  std::int64_t examples = 0;
  for (std::int64_t step = 0; steps < 0 || step < steps; ++step) {
    auto batch = it->next();
    if (!batch) break;
    LOCKSTEP_CHECK(batch->size() >= 2, "evaluate: dataset elements must be (x, y) pairs");
    cbs.each([&](Callback& c) { c.on_test_batch_begin(step, logs); });
    const Tensor x = input_of((*batch)[0]);
    const Tensor& y = (*batch)[1];
    LOCKSTEP_CHECK(y.rank() >= 1 && y.dim(0) == x.dim(0), "evaluate: x ", x.shape().str(), " and y ", y.shape().str(),
                   " have different batch sizes");
    if (!built()) build(Shape(x.shape()));
    ensure_mirrored();
    const auto parts = run_on_slices(strategy_, detail::split_batch(strategy_, {x, y}), [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
      const Output out = forward(s[0], layers::CallContext{.replica = rc});
      ReplicaNumbers r{.loss_sum = sum(loss_->per_example(s[1], out.output, out.logits))};
      for (const auto& m : metrics_) r.metric_states.push_back(m->batch_state(s[1], out.output));
      return r;
    });
    merge_replica_numbers(parts, x.dim(0), nullptr);
    examples += x.dim(0);
    logs = collect_logs("");
    cbs.each([&](Callback& c) { c.on_test_batch_end(step, logs); });
    if (bar) {
      std::vector<std::pair<std::string, double>> vals(logs.begin(), logs.end());
      bar->update(step + 1, vals);
    }
  }
  // Keras refuses this too: the mean of no examples would read as a loss of 0.
  LOCKSTEP_CHECK(examples > 0, "evaluate: the data produced no examples, so there is no loss to report");
  logs = collect_logs("");
  cbs.each([&](Callback& c) { c.on_test_end(logs); });
  return logs;
}

Logs Model::evaluate(const data::Dataset& dataset, const EvaluateOptions& o) {
  return evaluate_impl(dataset, o.steps, o.callbacks, o.verbose);
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& o) {
  LOCKSTEP_CHECK(x.rank() >= 1 && y.rank() >= 1 && x.dim(0) == y.dim(0), "evaluate: x ", x.shape().str(), " and y ",
                 y.shape().str(), " must have the same number of examples");
  LOCKSTEP_CHECK(o.batch_size > 0, "evaluate: batch_size must be positive");
  return evaluate_impl(data::Dataset::from_tensor_slices(x, y).batch(o.batch_size), o.steps, o.callbacks, o.verbose);
}

Tensor Model::predict(const data::Dataset& dataset, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.steps > 0 || dataset.cardinality() != data::kInfiniteCardinality,
                 "predict: the dataset is infinite (repeat()), so steps must be given");
  CallbackList cbs{o.callbacks};
  cbs.each([&](Callback& c) { c.set_model(this); });
  Logs logs;
  cbs.each([&](Callback& c) { c.on_predict_begin(logs); });
  std::vector<Tensor> outs;
  std::int64_t rows = 0;
  auto it = dataset.make_iterator();
  for (std::int64_t step = 0; o.steps < 0 || step < o.steps; ++step) {
    auto batch = it->next();
    if (!batch) break;
    cbs.each([&](Callback& c) { c.on_predict_batch_begin(step, logs); });
    const Tensor x = input_of((*batch)[0]);
    if (!built()) build(Shape(x.shape()));
    ensure_mirrored();
    const auto parts = run_on_slices(strategy_, detail::split_batch(strategy_, {x}), [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
      return forward(s[0], layers::CallContext{.replica = rc}).output;
    });
    outs.push_back(strategy_ ? strategy_->gather(parts) : parts[0]);
    rows += outs.back().dim(0);
    cbs.each([&](Callback& c) { c.on_predict_batch_end(step, logs); });
  }
  cbs.each([&](Callback& c) { c.on_predict_end(logs); });
  LOCKSTEP_CHECK(!outs.empty(), "predict: the input produced no batches");
  return concat(outs, 0);
}

Tensor Model::predict(const Tensor& x, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.batch_size > 0, "predict: batch_size must be positive");
  return predict(data::Dataset::from_tensor_slices(x).batch(o.batch_size), o);
}

}  // namespace lockstep
