#pragma once
// What model.cpp, fit and evaluate/predict share: one replica's numbers, the callback list, and
// the one path of a batch through the replicas (run_on_slices).
#include <cstdint>
#include <functional>
#include <type_traits>
#include <vector>

#include "lockstep/data/input_context.hpp"
#include "lockstep/distribute/strategy.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/training/callback.hpp"
#include "training/fit_batch.hpp"

namespace lockstep {

// Per-replica losses and metric states, summed across replicas by the strategy (the only
// cross-replica reduction of the model's numbers), then merged into the running trackers.
struct detail::ReplicaNumbers {
  Tensor loss_sum;
  std::vector<Tensor> metric_states;
  // Under loss scaling: whether the (all-reduced, so on every replica the same) gradients were
  // finite, i.e. whether the update was applied.
  bool gradients_finite = true;
};

namespace detail {

struct CallbackList {
  std::vector<CallbackPtr> cbs;
  template <typename F>
  void each(F&& f) {
    for (auto& c : cbs) f(*c);
  }
};

// The one path of a batch through the model: fn(slice, first_row, replica) runs once per
// replica on its slice (data::replica_rows, as experimental_distribute_dataset splits) with
// the slice's first row in the batch, or once on the whole batch without a strategy. A batch
// of rows is gathered there: each replica its own slice, on its own thread.
// With `next` (fit's following batch) each replica then prepares its slice of that one:
// - on a CPU it starts gathering it (FitBatch::gather_ahead), which its pool's workers copy
//   while they would wait between ops;
// - on a GPU it copies it to the device beside this step (TF's prefetch_to_device): memory is
//   reserved before the step is queued and the copy started after (FitBatch::reserve_upload,
//   start_upload), so that it runs on the copy stream while the step computes.
// Returns the per-replica results in replica order.
template <typename F>
auto run_on_slices(distribute::Strategy* strategy, const FitBatch& batch, F&& fn, const FitBatch* next = nullptr)
    -> distribute::PerReplica<std::invoke_result_t<F&, const data::Element&, std::int64_t, ReplicaInterface*>> {
  using R = std::invoke_result_t<F&, const data::Element&, std::int64_t, ReplicaInterface*>;
  const int n = strategy ? strategy->num_replicas_in_sync() : 1;
  if (next) next->make_slots(n);
  const auto run = [&](int replica, const data::Element& slice, std::int64_t first_row, ReplicaInterface* rc) {
    if (!next) return fn(distribute::to_current_device(slice), first_row, rc);
    const auto [begin, end] = data::replica_rows(next->size(), n, replica);
    const bool upload = context_device(current_compute_context()).kind != DeviceKind::kCpu;
    // With peers, a replica waits for them (at the gradient exchange, for the next step) and
    // gathers while it waits, even on one thread.
    if (upload) next->reserve_upload(replica, begin, end);
    else next->gather_ahead(replica, begin, end, n > 1);
    R result = fn(distribute::to_current_device(slice), first_row, rc);
    if (upload) next->start_upload(replica);
    return result;
  };
  if (!strategy) {
    const data::Element whole =
        batch.tensors() && !batch.uploaded(0) ? *batch.tensors() : batch.part(0, batch.size(), 0);
    return distribute::PerReplica<R>(std::vector<R>{run(0, whole, 0, nullptr)});
  }
  if (batch.tensors()) data::check_splittable(*batch.tensors(), n);
  return strategy->run([&](distribute::ReplicaContext& rc) {
    const int r = rc.replica_id_in_sync_group();
    const auto [begin, end] = data::replica_rows(batch.size(), n, r);
    return run(r, batch.part(begin, end, r), begin, &rc);
  });
}

}  // namespace detail
}  // namespace lockstep
