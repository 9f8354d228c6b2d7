#pragma once
// What the model's train step, fit and evaluate/predict share: one replica's numbers, the
// callback list, and the one path of a batch through the replicas (run_on_slices).
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "lockstep/data/input_context.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/training/callback.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep {

// Per-replica losses and metric states, summed across replicas by the strategy (the only
// cross-replica reduction of the model's numbers), then merged into the running trackers.
// The loss has one of two shapes, by the model: several_outputs() says which, the one test of it.
struct detail::ReplicaNumbers {
  Tensor loss_sum;                       // a model of one output (several outputs: undefined)
  std::vector<Tensor> output_loss_sums;  // a model of several outputs: each one's (unweighted; the
                                         // weighted total is formed where they are read)
  std::vector<Tensor> outputs;           // predict's: one per output
  std::vector<Tensor> metric_states;
  // Under loss scaling: whether the (all-reduced, so on every replica the same) gradients were
  // finite, i.e. whether the update was applied.
  bool gradients_finite = true;

  bool several_outputs() const { return !output_loss_sums.empty(); }
  /// f(t) for each loss sum, in the order they are packed and read: loss_sum, else each output's.
  template <typename F>
  void each_loss_sum(F&& f) const {
    if (!several_outputs()) f(loss_sum);
    for (const Tensor& t : output_loss_sums) f(t);
  }
};

// The numbers of the steps of one execution (steps_per_execution), each step's per-replica
// numbers and examples, kept on the devices until Model::merge_numbers reads them all at once.
// The merge's memory is kept for the next execution (fit's and evaluate's every step would
// otherwise allocate it again): each replica's numbers packed into one float32 vector on its
// device, and the host's copy of their sum.
struct detail::PendingNumbers {
  struct Step {
    distribute::PerReplica<ReplicaNumbers> parts;
    std::int64_t examples = 0;
    std::int64_t host_at = 0;  // where its numbers start in `host` (Model::read_numbers sets it)
  };
  std::vector<Step> steps;
  std::vector<Tensor> packed;  // [replica]
  std::vector<float> host;
};

// One replica's outputs: `one` for a model of one output (no vector on that path), else `many`.
// `losses`: that one output's per-example losses, `many_losses` each of several outputs' (the
// train step seeds their gradients there).
struct detail::SliceOutputs {
  Model::Output one;
  Tensor losses;
  std::vector<Model::Output> many;
  std::vector<Tensor> many_losses;
  const Model::Output& operator[](std::size_t k) const { return many.empty() ? one : many[k]; }
};

namespace detail {

struct CallbackList {
  std::vector<CallbackPtr> cbs;
  template <typename F>
  void each(F&& f) {
    for (auto& c : cbs) f(*c);
  }
  bool all_async_safe() const {
    for (const auto& c : cbs)
      if (!c->async_safe()) return false;
    return true;
  }
  /// Whether fit's epoch logs carry "learning_rate": Keras 3's ReduceLROnPlateau and
  /// LearningRateScheduler write it at each epoch's end, so that History has it (fit_loop.cpp).
  bool log_learning_rate() const;
};

// The one path of a batch through the model, the custom loops' (strategy.run(fn, batch)):
// fn(slice, first_row, replica) runs once per replica on its slice with the slice's first row in
// the global batch, or once on the whole batch without a strategy. Each replica meanwhile
// prepares its slice of the batch after, where the batch has one (DistributedBatch::ahead).
// Returns the per-replica results in replica order.
template <typename F>
auto run_on_slices(distribute::Strategy* strategy, const distribute::DistributedBatch& batch, F&& fn)
    -> distribute::PerReplica<std::invoke_result_t<F&, const data::Element&, std::int64_t, ReplicaInterface*>> {
  using R = std::invoke_result_t<F&, const data::Element&, std::int64_t, ReplicaInterface*>;
  if (strategy) {
    return strategy->run(
        [&](const data::Element& slice) {
          ReplicaInterface* rc = current_replica();
          return fn(slice, rc->first_example(), rc);
        },
        batch);
  }
  batch.make_ahead_slots();
  R result = fn(batch.begin_slice(0), 0, nullptr);
  batch.end_slice(0);
  return distribute::PerReplica<R>(std::vector<R>{std::move(result)});
}

// fit / evaluate / predict on in-memory tensors: one per input, then one per target (none for
// predict), checked against the model's structure (counts, then equal numbers of examples,
// ValueError naming the input or target).
data::Element tensor_components(const Model& model, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                                const char* what);

// A batch of tensors split over the strategy's replicas (this worker's), or whole without one.
inline distribute::DistributedBatch split_batch(distribute::Strategy* strategy, data::Element tensors) {
  if (!strategy) return distribute::DistributedBatch::split(std::make_shared<const distribute::GlobalBatch>(tensors), 1);
  const int n = strategy->num_replicas_in_sync(), local = strategy->num_local_replicas();
  data::check_splittable(tensors, n);
  return distribute::DistributedBatch::split(std::make_shared<const distribute::GlobalBatch>(std::move(tensors)), n,
                                             strategy->worker_index() * local, local);
}

}  // namespace detail
}  // namespace lockstep
