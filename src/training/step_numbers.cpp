// The numbers of a model's steps (losses, metric states), summed across the replicas and merged
// into its trackers: one reduction and one host read per execution (fit, evaluate).
#include "lockstep/training/model.hpp"
#include "training/replica_slices.hpp"

namespace lockstep {
namespace {
using detail::as_float;
using detail::ReplicaNumbers;

// A replica's numbers of one step, flattened: its loss sum and each output's (when the batch
// had examples), then each metric's state.
void append_numbers(const ReplicaNumbers& p, std::int64_t examples, std::vector<Tensor>& out) {
  if (examples) out.push_back(as_float(p.loss_sum).reshape({1}));
  if (examples)
    for (const Tensor& t : p.output_loss_sums) out.push_back(as_float(t).reshape({1}));
  for (const Tensor& t : p.metric_states) out.push_back(as_float(t).reshape({t.numel()}));
}

// Each replica's numbers packed into one float32 vector and summed over the replicas. On GPUs
// that is done on the devices (a collective, summing in replica order as Strategy::reduce
// does), so that the host reads one vector, not one per number, step or GPU; on CPUs and
// across workers through Strategy::reduce.
std::vector<float> summed_numbers(distribute::Strategy* strategy, const std::vector<std::vector<Tensor>>& pieces) {
  const auto pack = [&](std::size_t r) { return pieces[r].size() == 1 ? pieces[r][0] : concat(pieces[r], 0); };
  Tensor total;
  if (!strategy) {
    total = pack(0);
  } else if (strategy->num_workers() > 1 || pieces[0][0].device().kind == DeviceKind::kCpu) {
    std::vector<Tensor> packed;
    for (std::size_t r = 0; r < pieces.size(); ++r) packed.push_back(pack(r));
    total = strategy->reduce(ReduceOp::kSum, distribute::PerReplica<Tensor>(std::move(packed)));
  } else {
    total = strategy->run([&](distribute::ReplicaContext& ctx) {
      const Tensor mine = pack(static_cast<std::size_t>(ctx.local_replica_id()));
      return pieces.size() > 1 ? ctx.all_reduce(ReduceOp::kSum, mine) : mine;
    })[0];
  }
  std::vector<float> numbers = total.to_vector<float>();
  // A collective the watchdog aborted (NCCL: a dead peer, the deadline; nccl_group.cpp) ends
  // with what it wrote undefined, and the host learns it only from the group: numbers read after
  // such an abort are not handed on (to logs, callbacks, a checkpoint's decision).
  if (strategy && strategy->collectives().failed())
    throw DistributedError("the losses and metrics of this execution were not used: the replicas' collectives failed "
                           "while they were summed: " + strategy->collectives().failure());
  return numbers;
}
}  // namespace

void Model::merge_replica_numbers(const distribute::PerReplica<ReplicaNumbers>& parts, std::int64_t examples,
                                  double* mean_loss) {
  detail::PendingNumbers one;
  one.steps.push_back({parts, examples});
  const double loss = merge_numbers(one);
  if (mean_loss) *mean_loss = loss;
}

double Model::merge_numbers(detail::PendingNumbers& pending) {
  // Each replica's numbers of every step travel as one vector, so an execution costs one
  // cross-replica reduction and one host read, not one per number or step: across workers each
  // is a collective round trip, on a GPU a wait for the device (element-wise sums, so the
  // result is what separate reductions gave).
  const std::size_t replicas = pending.steps.empty() ? 0 : pending.steps.front().parts.size();
  const std::size_t per_step = 1 + output_loss_trackers_.size() + metrics_.size();  // at most
  std::vector<std::vector<Tensor>> pieces(replicas);
  for (std::size_t r = 0; r < replicas; ++r) {
    pieces[r].reserve(per_step * pending.steps.size());
    for (const auto& step : pending.steps) append_numbers(step.parts[r], step.examples, pieces[r]);
  }
  // Without a strategy there is nothing to reduce and the numbers are used as they are.
  std::vector<float> v = replicas && !pieces[0].empty() ? summed_numbers(strategy_, pieces) : std::vector<float>{};
  std::size_t at = 0;
  double batch_loss = 0.0;
  for (const auto& step : pending.steps) {
    const ReplicaNumbers& p = step.parts[0];
    const auto examples = static_cast<double>(step.examples);
    const double loss_sum = step.examples ? static_cast<double>(v[at++]) : 0.0;
    if (step.examples)
      for (std::size_t k = 0; k < p.output_loss_sums.size(); ++k)
        output_loss_trackers_[k].update(static_cast<double>(v[at++]) / examples, examples);
    for (std::size_t m = 0; m < metrics_.size(); ++m) {
      const auto n = static_cast<std::size_t>(p.metric_states[m].numel());
      // Read in place: v outlives the merge, which only reads the state.
      metrics_[m]->merge_state(Tensor::wrap(v.data() + at, {static_cast<std::int64_t>(n)}, DType::kF32));  // host memory
      at += n;
    }
    batch_loss = step.examples ? loss_sum / examples : 0.0;
    if (step.examples) loss_tracker_.update(batch_loss, examples);
  }
  pending.steps.clear();
  return batch_loss;
}

}  // namespace lockstep
