// Strategy::reduce, gather and broadcast_from_chief: the replicas' values combined into one on
// this worker, or across every worker through the strategy's own collective group.
#include <algorithm>

#include "distribute/replica_threads.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

namespace {
// Results of reduce and gather live on the host (TF's default destination), whatever device
// the replicas' values are on; host values stay as they are (views, no copy).
PerReplica<Tensor> on_host(const PerReplica<Tensor>& values) {
  bool all_host = true;
  for (std::size_t r = 0; r < values.size(); ++r) all_host &= values[r].device().kind == DeviceKind::kCpu;
  if (all_host) return values;
  std::vector<Tensor> out;
  for (std::size_t r = 0; r < values.size(); ++r)
    out.push_back(values[r].device().kind == DeviceKind::kCpu ? values[r] : values[r].to(Device{}));
  return PerReplica<Tensor>(std::move(out));
}

// TF's axis for reduce and gather: one of replica 0's value's axes (negative: from the last).
int value_axis(const char* what, const PerReplica<Tensor>& values, int axis) {
  const int rank = static_cast<int>(values[0].rank());
  LOCKSTEP_CHECK(rank >= 1 && axis >= -rank && axis < rank, "Strategy::", what, ": axis ", axis,
                 " is out of range for replica 0's value of shape ", values[0].shape().str());
  return axis < 0 ? axis + rank : axis;
}
}  // namespace

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& replica_values, std::optional<int> axis) const {
  LOCKSTEP_CHECK(replica_values.size() > 0, "Strategy::reduce: no values");
  if (axis) axis = value_axis("reduce", replica_values, *axis);
  if (num_workers_ > 1) return reduce_across_workers(op, replica_values, axis);
  const PerReplica<Tensor> values = on_host(replica_values);
  if (axis) {
    LOCKSTEP_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMean, "Strategy::reduce with an axis supports sum and mean");
    Tensor all = gather(values, *axis);
    return op == ReduceOp::kSum ? sum(all, *axis) : mean(all, *axis);
  }
  const Tensor& first = values[0];
  for (std::size_t r = 1; r < values.size(); ++r) {
    LOCKSTEP_CHECK(values[r].shape() == first.shape(), "Strategy::reduce: replica ", r, " has shape ",
                   values[r].shape().str(), " but replica 0 has ", first.shape().str());
  }
  Tensor acc = first.dtype() == DType::kF32 ? first.clone() : first.to(DType::kF32);
  for (std::size_t r = 1; r < values.size(); ++r) {
    const Tensor v = values[r].to(DType::kF32);
    acc = op == ReduceOp::kMax ? maximum(acc, v) : op == ReduceOp::kMin ? minimum(acc, v) : add(acc, v);
  }
  if (op == ReduceOp::kMean) acc = scale(acc, 1.0f / static_cast<float>(values.size()));
  return acc;
}

Tensor Strategy::gather(const PerReplica<Tensor>& values, int axis) const {
  LOCKSTEP_CHECK(values.size() > 0, "Strategy::gather: no values");
  const int a = value_axis("gather", values, axis);
  if (num_workers_ > 1) return gather_across_workers(values, a);
  return concat(on_host(values).values(), a);
}

// Across workers the replicas' values travel through the strategy's own collective group, so
// that they are combined as the gradients are: in replica order within a worker, then in
// worker order. They run the replicas (a const strategy's threads are still its own).
Tensor Strategy::reduce_across_workers(ReduceOp op, const PerReplica<Tensor>& values, std::optional<int> axis) const {
  LOCKSTEP_CHECK(static_cast<int>(values.size()) == num_local_replicas(), "Strategy::reduce: ", values.size(),
                 " values for ", num_local_replicas(), " local replicas");
  if (axis) LOCKSTEP_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMean, "Strategy::reduce with an axis supports sum and mean");
  Strategy* self = replicas_->owner;
  std::vector<Tensor> sums(values.size()), counts(values.size());
  self->run_on_replicas([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.local_replica_id());
    const Tensor& v = values[r];
    Tensor t = axis ? sum(v.to(DType::kF32), *axis)
                    : (v.dtype() == DType::kF32 ? v.clone() : v.to(DType::kF32));
    ctx.communicator().all_reduce(t, op == ReduceOp::kMean ? ReduceOp::kSum : op)->wait();
    sums[r] = t;
    if (axis && op == ReduceOp::kMean) {
      Tensor c = Tensor::full({1}, static_cast<float>(v.dim(*axis)));
      ctx.communicator().all_reduce(c, ReduceOp::kSum)->wait();
      counts[r] = c;
    }
  });
  Tensor acc = sums[0];
  if (op == ReduceOp::kMean) {
    const float n = axis ? counts[0].item() : static_cast<float>(num_replicas_in_sync());
    acc = scale(acc, 1.0f / n);
  }
  return acc;
}

Tensor Strategy::gather_across_workers(const PerReplica<Tensor>& values, int axis) const {
  LOCKSTEP_CHECK(static_cast<int>(values.size()) == num_local_replicas(), "Strategy::gather: ", values.size(),
                 " values for ", num_local_replicas(), " local replicas");
  const Tensor& first = values[0];
  const int n = num_replicas_in_sync();
  Strategy* self = replicas_->owner;
  // Every replica's length along the axis first (they may differ), then every replica's value,
  // flattened and padded to the longest.
  for (std::size_t r = 1; r < values.size(); ++r) {
    const Tensor& v = values[r];
    bool fits = v.rank() == first.rank() && v.dtype() == first.dtype();
    for (int d = 0; fits && d < static_cast<int>(first.rank()); ++d) fits = d == axis || v.dim(d) == first.dim(d);
    LOCKSTEP_CHECK(fits, "Strategy::gather: replica ", r, " has ", v.shape().str(), " ", dtype_name(v.dtype()),
                   ", replica 0 has ", first.shape().str(), " ", dtype_name(first.dtype()),
                   " (they may differ only along axis ", axis, ")");
  }
  std::vector<Tensor> all_lengths(values.size());
  self->run_on_replicas([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.local_replica_id());
    const Tensor& v = values[r];
    Tensor mine = Tensor::full({1}, static_cast<float>(v.dim(axis)));
    Tensor out = Tensor::empty({n}, DType::kF32);
    ctx.communicator().all_gather(mine, out)->wait();
    all_lengths[r] = out;
  });
  std::int64_t others = 1;  // elements per index along the axis
  for (int d = 0; d < static_cast<int>(first.rank()); ++d) others *= d == axis ? 1 : first.dim(d);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
  std::int64_t longest = 0;
  for (int j = 0; j < n; ++j) {
    lengths[static_cast<std::size_t>(j)] = static_cast<std::int64_t>(all_lengths[0].slice(j, j + 1).item());
    longest = std::max(longest, lengths[static_cast<std::size_t>(j)]);
  }
  std::vector<Tensor> gathered(values.size());
  self->run_on_replicas([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.local_replica_id());
    const Tensor& v = values[r];
    Tensor padded = Tensor::zeros({longest * others}, v.dtype());
    if (v.numel() > 0) padded.slice(0, v.numel()).copy_from(v.reshape(Shape{v.numel()}));
    Tensor out = Tensor::empty({longest * others * n}, v.dtype());
    ctx.communicator().all_gather(padded, out)->wait();
    gathered[r] = out;
  });
  std::vector<Tensor> parts;
  for (int j = 0; j < n; ++j) {
    const std::int64_t b = j * longest * others;
    std::vector<std::int64_t> dims = first.shape().dims();
    dims[static_cast<std::size_t>(axis)] = lengths[static_cast<std::size_t>(j)];
    parts.push_back(gathered[0].slice(b, b + dims[static_cast<std::size_t>(axis)] * others).reshape(Shape(dims)));
  }
  return concat(parts, axis);
}

void Strategy::broadcast_from_chief(const std::vector<std::vector<Tensor>>& tensors) {
  if (num_workers_ == 1) return;
  for (const auto& copies : tensors)
    LOCKSTEP_CHECK(static_cast<int>(copies.size()) == num_local_replicas(), "broadcast_from_chief: ", copies.size(),
                   " copies for ", num_local_replicas(), " local replicas");
  run_on_replicas([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.local_replica_id());
    std::vector<WorkPtr> works;
    for (const auto& copies : tensors) {
      Tensor t = copies[r];
      works.push_back(ctx.communicator().broadcast(t, 0));
    }
    for (auto& w : works) w->wait();
  });
}

}  // namespace lockstep::distribute
