// The numbers of a model's steps (losses, metric states), summed across the replicas and merged
// into its trackers: one reduction and one host read per execution (fit, evaluate), or per
// several executions where fit defers its reads (fit_loop.cpp).
#include "training/step_numbers.hpp"

#include <atomic>

#include "lockstep/training/model.hpp"
#include "tensor/write_at.hpp"
#include "training/replica_slices.hpp"

namespace lockstep {
namespace {
std::atomic<std::int64_t> g_host_reads{0};
using detail::PendingNumbers;
using detail::ReplicaNumbers;

// A replica's numbers of one step, flattened: its loss sums (each_loss_sum's), when the batch had
// examples, then each metric's state. `f` is called with each in that order.
template <typename F>
void each_number(const ReplicaNumbers& p, std::int64_t examples, F&& f) {
  if (examples) p.each_loss_sum(f);
  for (const Tensor& t : p.metric_states) f(t);
}

// How many float32 numbers a step's replica contributes (each_number's).
std::int64_t step_number_count(const PendingNumbers::Step& step) {
  std::int64_t count = 0;
  each_number(step.parts[0], step.examples, [&](const Tensor& t) { count += t.numel(); });
  return count;
}

// Replica r's numbers of every pending step written one after another into one float32 vector
// on its device (this thread's): the pending numbers' own, made again only where their count or
// device changed.
const Tensor& packed_numbers(PendingNumbers& pending, std::size_t r, std::int64_t count) {
  Tensor& out = pending.packed[r];
  if (!out.defined() || out.numel() != count || out.device() != context_device(current_compute_context()))
    out = Tensor::empty({count});
  std::int64_t at = 0;
  for (const auto& step : pending.steps)
    each_number(step.parts[r], step.examples, [&](const Tensor& t) {
      detail::write_at(out, at, t.to(DType::kF32));
      at += t.numel();
    });
  return out;
}

// Each replica's numbers packed into one float32 vector and summed over the replicas, read into
// pending.host. On GPUs that is done on the devices (a collective, summing in replica order as
// Strategy::reduce does), so that the host reads one vector, not one per number, step or GPU;
// on CPUs and across workers through Strategy::reduce (one replica's sum is its own numbers).
void read_summed_numbers(distribute::Strategy* strategy, PendingNumbers& pending, std::int64_t count) {
  const std::size_t replicas = pending.steps.front().parts.size();
  pending.packed.resize(replicas);
  Tensor total;
  if (!strategy) {
    total = packed_numbers(pending, 0, count);
  } else if (strategy->num_workers() > 1 || strategy->devices().front().kind == DeviceKind::kCpu) {
    for (std::size_t r = 0; r < replicas; ++r) (void)packed_numbers(pending, r, count);
    total = replicas == 1 && strategy->num_workers() == 1
                ? pending.packed[0]
                : strategy->reduce(ReduceOp::kSum, distribute::PerReplica<Tensor>(pending.packed));
  } else {
    // The replicas' function captures one reference, which std::function keeps without a heap
    // allocation (four did not fit: one allocation per read, issue 37).
    struct Read {
      PendingNumbers& pending;
      std::int64_t count;
      std::size_t replicas;
      Tensor& total;
    } read{pending, count, replicas, total};
    strategy->run_void([&read](distribute::ReplicaContext& ctx) {
      const auto r = static_cast<std::size_t>(ctx.local_replica_id());
      const Tensor& mine = packed_numbers(read.pending, r, read.count);
      const Tensor sum = read.replicas > 1 ? ctx.all_reduce(ReduceOp::kSum, mine) : mine;
      if (r == 0) read.total = sum;
    });
  }
  pending.host.resize(static_cast<std::size_t>(count));
  total.copy_to_host(pending.host.data(), pending.host.size() * sizeof(float));
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  // A collective the watchdog aborted (NCCL: a dead peer, the deadline; nccl_group.cpp) ends
  // with what it wrote undefined, and the host learns it only from the group: numbers read after
  // such an abort are not handed on (to logs, callbacks, a checkpoint's decision).
  if (strategy && strategy->collectives().failed())
    throw DistributedError("the losses and metrics of this execution were not used: the replicas' collectives failed "
                           "while they were summed: " + strategy->collectives().failure());
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
  read_numbers(pending);
  const double batch_loss = merge_read_numbers(pending, 0, pending.steps.size());
  pending.steps.clear();
  return batch_loss;
}

void Model::read_numbers(detail::PendingNumbers& pending) {
  // Each replica's numbers of every step travel as one vector, so an execution (or fit's
  // several deferred ones) costs one cross-replica reduction and one host read, not one per
  // number or step: across workers each is a collective round trip, on a GPU a wait for the
  // device (element-wise sums, so the result is what separate reductions gave).
  std::int64_t count = 0;
  for (auto& step : pending.steps) {
    step.host_at = count;
    count += step_number_count(step);
  }
  // Without a strategy there is nothing to reduce and the numbers are used as they are.
  if (count) read_summed_numbers(strategy_, pending, count);
}

double Model::merge_read_numbers(const detail::PendingNumbers& pending, std::size_t first, std::size_t last) {
  double batch_loss = 0.0;
  for (std::size_t s = first; s < last; ++s) {
    const PendingNumbers::Step& step = pending.steps[s];
    const ReplicaNumbers& p = step.parts[0];
    const float* v = pending.host.data() + step.host_at;  // in each_number's order
    const auto examples = static_cast<double>(step.examples);
    // A model of several outputs: the loss is their sums weighted and added here, on the host
    // (no kernel in the step), in double, in the order of the outputs.
    double loss_sum = step.examples && !p.several_outputs() ? static_cast<double>(*v++) : 0.0;
    if (step.examples)
      for (std::size_t k = 0; k < p.output_loss_sums.size(); ++k) {
        const auto output_sum = static_cast<double>(*v++);
        output_loss_trackers_[k].update(output_sum / examples, examples);
        loss_sum += output_losses_[k].weight * output_sum;
      }
    for (std::size_t m = 0; m < metrics_.size(); ++m) {
      // Each metric's summed state, merged where it was read (no tensor made for it).
      const auto n = static_cast<std::size_t>(p.metric_states[m].numel());
      metrics_[m].metric->merge_state(std::span<const float>(v, n));
      v += n;
    }
    batch_loss = step.examples ? loss_sum / examples : 0.0;
    if (step.examples) loss_tracker_.update(batch_loss, examples);
  }
  return batch_loss;
}

std::int64_t detail::host_number_reads() { return g_host_reads.load(std::memory_order_relaxed); }

}  // namespace lockstep
