#include "lockstep/distribute/strategy.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "backend/kernels.hpp"
#include "distribute/replica_threads.hpp"
#include "distribute/worker_transport.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

namespace {
thread_local Strategy* t_current_strategy = nullptr;

}  // namespace

Strategy::Strategy(StrategyLayout layout)
    : devices_(std::move(layout.devices)),
      num_workers_(layout.num_workers),
      worker_index_(layout.worker_index),
      check_mirrored_each_step_(layout.check_mirrored),
      replicas_(std::make_unique<Replicas>()) {
  const auto& threads = layout.threads;
  const auto& cpus = layout.cpus;
  const int n = static_cast<int>(devices_.size());
  LOCKSTEP_CHECK(n >= 1, "a strategy needs at least one device");
  for (int r = 0; r < n; ++r) {
    contexts_.push_back(make_compute_context(devices_[static_cast<std::size_t>(r)], threads[static_cast<std::size_t>(r)],
                                             cpus[static_cast<std::size_t>(r)], layout.memory_limit));
    context_ptrs_.push_back(contexts_.back().get());
  }
  group_ = make_collective_group(layout.cross_device_ops, n, {.timeout = layout.timeout, .devices = devices_});
  ShardedUpdateOptions update{.num_local_replicas = n,
                              .num_workers = num_workers_,
                              .worker_index = worker_index_,
                              .bucket_cap_bytes = layout.bucket_cap_bytes};
  // Sharding needs every copy of a variable in host memory: each replica writes its updated
  // shard into this process's other copies (one worker) or all-gathers the shards (several).
  bool all_cpu = true;
  for (const Device& d : devices_) all_cpu = all_cpu && d.kind == DeviceKind::kCpu;
  update.shard = layout.shard_optimizer_update && n * num_workers_ > 1 && all_cpu;
  // One process's replicas share the host's memory: they read each other's gradients in place
  // (MirroredOptions::gradients_in_place false reduce-scatters them as across workers; for
  // comparisons).
  update.gradients_in_place = update.shard && num_workers_ == 1 && layout.gradients_in_place;
  // Workers may differ here: either way every bucket's collective starts in bucket order.
  update.overlap = layout.overlap_gradients;
  update_ = std::make_unique<ShardedUpdate>(*group_, update);
  replicas_->owner = this;
  start_replica_threads();
}

backend::ComputeContext& Strategy::context(int replica) {
  LOCKSTEP_CHECK(replica >= 0 && replica < num_local_replicas(), "replica ", replica, " out of range");
  return *contexts_[static_cast<std::size_t>(replica)];
}

Strategy* Strategy::current() { return t_current_strategy; }

StrategyScope::StrategyScope(Strategy& strategy)
    : strategy_(strategy), mirror_(strategy.contexts()), previous_(t_current_strategy) {
  t_current_strategy = &strategy;
}
StrategyScope::~StrategyScope() { t_current_strategy = previous_; }

void Strategy::mirror_variables(const std::vector<Variable>& variables) {
  for (auto v : variables) v.mirror(context_ptrs_);
}

void Strategy::check_mirrored(const std::vector<Variable>& variables) const {
  for (const auto& v : variables) {
    if (v.synchronization() == VariableSynchronization::kOnRead) continue;  // its copies differ by design
    for (int r = 1; r < v.num_copies(); ++r) {
      const Tensor& a = v.copy(0);
      const Tensor& b = v.copy(r);
      if (!a.bitwise_equal(b)) {
        throw DistributedError("mirrored variable '" + v.name() + "' drifted: replica " + std::to_string(r) +
                               "'s copy differs from replica 0's");
      }
    }
  }
}

Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size) {
  LOCKSTEP_CHECK(global_batch_size > 0, "compute_average_loss: global_batch_size must be positive, got ",
                 global_batch_size);
  return scale(sum(per_example_loss), 1.0f / static_cast<float>(global_batch_size));
}

Tensor compute_average_loss(const Tensor& per_example_loss) {
  LOCKSTEP_CHECK(per_example_loss.defined() && per_example_loss.rank() >= 1,
                 "compute_average_loss: expects per-example losses (rank >= 1), got ",
                 per_example_loss.defined() ? per_example_loss.shape().str() : std::string("an undefined tensor"));
  const std::int64_t local = per_example_loss.dim(0);
  const ReplicaInterface* r = current_replica();
  std::int64_t global = local;
  if (r) global = r->global_batch_size() > 0 ? r->global_batch_size() : local * r->num_replicas_in_sync();
  // An empty slice of a non-empty batch contributes 0; an empty batch has no mean (as TF: 0).
  if (global == 0) return scale(sum(per_example_loss), 0.0f);
  return compute_average_loss(per_example_loss, global);
}

}  // namespace lockstep::distribute
