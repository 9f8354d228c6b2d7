// Model::evaluate and Model::predict: a pass over the data through the replicas, no update; each
// replica's step captured and replayed per input signature under jit_compile (step_jit.hpp).
#include <memory>
#include <optional>

#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/training/model.hpp"
#include "lockstep/training/progbar.hpp"
#include "training/progbar_values.hpp"
#include "training/replica_slices.hpp"
#include "training/sample_weights.hpp"
#include "training/step_jit.hpp"

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
  check_strategy_alive();
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
  const auto run_step = [&](const data::Element& batch, detail::PendingNumbers& pending) {
    check_components(batch.size(), "evaluate");
    data::Element xy = batch;  // inputs, targets, then any sample weights
    const Tensor& x = xy[0];
    const std::size_t n_xy = inputs_.size() + outputs_.size();
    for (std::size_t i = 1; i < xy.size(); ++i)
      LOCKSTEP_CHECK(xy[i].rank() >= 1 && xy[i].dim(0) == x.dim(0), "evaluate: x ", x.shape().str(), " and ",
                     i < inputs_.size() ? "x" : i < n_xy ? "y" : "sample_weight", " ", xy[i].shape().str(),
                     " have different batch sizes");
    if (!built()) build(Shape(x.shape()));
    ensure_mirrored();  // may make the step functions again (a layer added since): taken after it
    const std::shared_ptr<detail::StepJit> jit = step_jit(StepFunction::kTest);
    const std::int64_t rows = x.dim(0);
    const auto parts = jit->step(strategy_, detail::split_batch(strategy_, std::move(xy)), jit_compile_, name(),
                                 [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
                                   detail::SliceOutputs outs;
                                   ReplicaNumbers r;
                                   const layers::CallContext ctx{.replica = rc, .softmax_to_loss = true, .read_only = true};
                                   slice_loss(s, ctx, outs, r);
                                   slice_metric_states(s, outs, r);
                                   return r;
                                 });
    pending.steps.push_back({parts, rows});
    examples += rows;
  };
  // Executions of steps_per_execution batches: callbacks and one read of the numbers each.
  std::optional<data::Element> batch = steps == 0 ? std::nullopt : it->next();
  detail::PendingNumbers pending;  // merge_numbers empties it, keeping its memory for the next execution
  for (std::int64_t step = 0; batch;) {
    const std::int64_t begin = step;
    cbs.each([&](Callback& c) { c.on_test_batch_begin(begin, logs); });
    for (std::int64_t i = 0; batch && i < steps_per_execution_ && (steps < 0 || step < steps); ++i, ++step) {
      run_step(*batch, pending);
      batch = steps < 0 || step + 1 < steps ? it->next() : std::nullopt;
    }
    merge_numbers(pending);
    logs = collect_logs("");
    cbs.each([&](Callback& c) { c.on_test_batch_end(step - 1, logs); });
    if (bar) bar->update(step, detail::progbar_values(logs));
  }
  // Keras refuses this too: the mean of no examples would read as a loss of 0.
  LOCKSTEP_CHECK(examples > 0, "evaluate: the data produced no examples, so there is no loss to report");
  logs = collect_logs("");
  cbs.each([&](Callback& c) { c.on_test_end(logs); });
  return logs;
}

Logs Model::evaluate(const data::Dataset& dataset, const EvaluateOptions& o) {
  detail::check_no_sample_weight_beside(o.sample_weight.defined() || !o.sample_weights.empty(), "evaluate");
  return evaluate_impl(dataset, o.steps, o.callbacks, o.verbose);
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& o) {
  LOCKSTEP_CHECK(x.rank() >= 1 && y.rank() >= 1 && x.dim(0) == y.dim(0), "evaluate: x ", x.shape().str(), " and y ",
                 y.shape().str(), " must have the same number of examples");
  return evaluate_tensors({x, y}, o);
}

Logs Model::evaluate(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, const EvaluateOptions& o) {
  return evaluate_tensors(detail::tensor_components(*this, xs, ys, "evaluate"), o);
}

Logs Model::evaluate_tensors(data::Element xy, const EvaluateOptions& o) {
  LOCKSTEP_CHECK(o.batch_size > 0, "evaluate: batch_size must be positive");
  xy = detail::with_sample_weights(*this, std::move(xy), o.sample_weight, o.sample_weights, "evaluate");
  return evaluate_impl(data::Dataset::from_tensor_slices(std::move(xy)).batch(o.batch_size), o.steps, o.callbacks,
                       o.verbose);
}

std::vector<Tensor> Model::predict_outputs(const data::Dataset& dataset, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.steps > 0 || dataset.cardinality() != data::kInfiniteCardinality,
                 "predict: the dataset is infinite (repeat()), so steps must be given");
  check_strategy_alive();
  CallbackList cbs{o.callbacks};
  cbs.each([&](Callback& c) { c.set_model(this); });
  Logs logs;
  cbs.each([&](Callback& c) { c.on_predict_begin(logs); });
  std::vector<std::vector<Tensor>> outs(outputs_.size());  // per output, per batch
  const std::size_t n_in = inputs_.size();
  auto it = dataset.make_iterator();
  // One step's outputs, per replica, kept on the devices until its execution ends.
  using StepOutputs = distribute::PerReplica<std::vector<Tensor>>;
  const auto run_step = [&](const data::Element& batch) {
    LOCKSTEP_CHECK(batch.size() >= n_in, "predict: model '", name(), "' takes ", n_in, " input(s) (",
                   inputs_.joined(), "), but the elements hold ", batch.size(), " tensor(s)");
    data::Element xs;
    for (std::size_t i = 0; i < n_in; ++i) xs.push_back(input_of(batch[i]));
    for (std::size_t i = 1; i < n_in; ++i)
      LOCKSTEP_CHECK(xs[i].rank() >= 1 && xs[i].dim(0) == xs[0].dim(0), "predict: input '", inputs_.names[i], "' ",
                     xs[i].shape().str(), " and input '", inputs_.names[0], "' ", xs[0].shape().str(),
                     " have different batch sizes");
    if (!built()) build(Shape(xs[0].shape()));
    ensure_mirrored();
    const std::shared_ptr<detail::StepJit> jit = step_jit(StepFunction::kPredict);
    auto parts = jit->step(strategy_, detail::split_batch(strategy_, std::move(xs)), jit_compile_, name(),
                           [&](const data::Element& s, std::int64_t, ReplicaInterface* rc) {
                             const layers::CallContext ctx{.replica = rc, .read_only = true};
                             ReplicaNumbers r;
                             if (n_in == 1 && outputs_.size() == 1) {
                               r.outputs = {forward(s[0], ctx).output};
                               return r;
                             }
                             for (auto& out : forward_all(std::span<const Tensor>(s.data(), n_in), ctx))
                               r.outputs.push_back(std::move(out.output));
                             return r;
                           });
    std::vector<std::vector<Tensor>> outputs;
    for (ReplicaNumbers& r : parts.values()) outputs.push_back(std::move(r.outputs));
    return StepOutputs(std::move(outputs));
  };
  const auto gather_step = [&](const StepOutputs& parts) {
    for (std::size_t k = 0; k < outs.size(); ++k) {
      std::vector<Tensor> per_replica;
      for (const auto& p : parts.values()) per_replica.push_back(p[k]);
      const distribute::PerReplica<Tensor> kth(std::move(per_replica));
      outs[k].push_back(strategy_ ? strategy_->gather(kth) : kth[0]);
    }
  };
  // On the GPUs of one worker, an execution's outputs are read once from each device: its rows
  // of every step joined there, then cut back into steps on the host, in Strategy::gather's order.
  const auto gather_execution = [&](const std::vector<StepOutputs>& pending) {
    const bool on_devices = strategy_ && strategy_->num_workers() == 1 && !pending.front()[0].empty() &&
                            pending.front()[0][0].device().kind != DeviceKind::kCpu;
    if (!on_devices || pending.size() == 1) {
      for (const auto& parts : pending) gather_step(parts);
      return;
    }
    const std::size_t replicas = pending.front().size();
    for (std::size_t k = 0; k < outs.size(); ++k) {
      std::vector<Tensor> host(replicas);
      for (std::size_t r = 0; r < replicas; ++r) {
        std::vector<Tensor> mine;
        for (const auto& parts : pending) mine.push_back(parts[r][k]);
        Tensor joined;
        {
          const ComputeScope scope(strategy_->context(static_cast<int>(r)));
          joined = concat(mine, 0);
        }
        host[r] = joined.on_host();
      }
      std::vector<std::int64_t> at(replicas, 0);
      for (const auto& parts : pending) {
        std::vector<Tensor> rows;
        for (std::size_t r = 0; r < replicas; ++r) {
          const std::int64_t n = parts[r][k].dim(0);
          rows.push_back(host[r].slice(at[r], at[r] + n));
          at[r] += n;
        }
        outs[k].push_back(rows.size() == 1 ? rows[0] : concat(rows, 0));
      }
    }
  };
  // Executions of steps_per_execution batches: callbacks and the outputs' gathering once each.
  std::optional<data::Element> batch = o.steps == 0 ? std::nullopt : it->next();
  for (std::int64_t step = 0; batch;) {
    const std::int64_t begin = step;
    cbs.each([&](Callback& c) { c.on_predict_batch_begin(begin, logs); });
    std::vector<StepOutputs> pending;
    for (std::int64_t i = 0; batch && i < steps_per_execution_ && (o.steps < 0 || step < o.steps); ++i, ++step) {
      pending.push_back(run_step(*batch));
      batch = o.steps < 0 || step + 1 < o.steps ? it->next() : std::nullopt;
    }
    gather_execution(pending);
    cbs.each([&](Callback& c) { c.on_predict_batch_end(step - 1, logs); });
  }
  cbs.each([&](Callback& c) { c.on_predict_end(logs); });
  LOCKSTEP_CHECK(!outs.front().empty(), "predict: the input produced no batches");
  std::vector<Tensor> result;
  for (auto& chunks : outs) result.push_back(concat(chunks, 0));
  return result;
}

Tensor Model::predict(const data::Dataset& dataset, const PredictOptions& o) {
  LOCKSTEP_CHECK(outputs_.size() == 1, "predict: model '", name(), "' has ", outputs_.size(), " outputs (",
                 outputs_.joined(), "); predict_outputs returns one tensor per output");
  return predict_outputs(dataset, o).front();
}

std::vector<Tensor> Model::predict(const std::vector<Tensor>& xs, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.batch_size > 0, "predict: batch_size must be positive");
  return predict_outputs(data::Dataset::from_tensor_slices(detail::tensor_components(*this, xs, {}, "predict")).batch(o.batch_size), o);
}

Tensor Model::predict(const Tensor& x, const PredictOptions& o) {
  LOCKSTEP_CHECK(o.batch_size > 0, "predict: batch_size must be positive");
  return predict(data::Dataset::from_tensor_slices(x).batch(o.batch_size), o);
}

}  // namespace lockstep
