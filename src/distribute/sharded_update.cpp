#include "lockstep/distribute/sharded_update.hpp"

#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

ShardedUpdate::ShardedUpdate(CollectiveGroup& group, const ShardedUpdateOptions& options)
    : group_(group), options_(options) {
  const auto n = static_cast<std::size_t>(options.num_local_replicas);
  for (std::size_t r = 0; r < n; ++r) reducers_.push_back(std::make_unique<GradientReducer>(options.bucket_cap_bytes));
  no_sync_.assign(n, 0);
  published_grads_.resize(n);
  published_vars_.resize(n);
  register_sharded_slots(this);
}

ShardedUpdate::~ShardedUpdate() { unregister_sharded_slots(this); }

bool ShardedUpdate::allows(const std::vector<Variable>& vars) const {
  if (!options_.shard) return false;
  for (const Variable& v : vars)
    if (v.num_copies() != options_.num_local_replicas || v.value().dtype() != DType::kF32) return false;
  return true;
}

GradientReadyFn ShardedUpdate::begin(int replica, const std::vector<Variable>& vars, const ElementwiseRule* rule) {
  const auto r = static_cast<std::size_t>(replica);
  const bool scatter = sharded(vars, rule);
  // Gradients read in place are not exchanged: nothing to start early.
  const bool alone = options_.num_local_replicas * options_.num_workers == 1;
  if (!options_.overlap || no_sync_[r] || !held_back_.empty() || alone || (scatter && options_.gradients_in_place))
    return {};
  GradientReducer& reducer = *reducers_[r];
  const GradientExchange kind = scatter ? GradientExchange::kReduceScatter : GradientExchange::kAllReduce;
  reducer.begin(group_.member(replica), vars, kind);
  return [&reducer](std::size_t i, const Tensor& grad) { reducer.ready(i, grad); };
}

GradientsExchanged ShardedUpdate::exchange(int replica, std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                           ElementwiseRule* rule, std::int64_t step) {
  const auto r = static_cast<std::size_t>(replica);
  if (no_sync_[r]) {
    held_back_.add(grads, vars);
    return GradientsExchanged::kHeldBack;
  }
  if (!held_back_.empty()) grads = held_back_.take(grads, vars);
  GradientReducer& reducer = *reducers_[r];
  Communicator& comm = group_.member(replica);
  if (!sharded(vars, rule)) {
    if (options_.num_workers > 1) check_whole(vars);
    if (reducer.in_progress(vars, GradientExchange::kAllReduce)) reducer.finish_all_reduce(grads);
    else reducer.all_reduce(comm, grads, vars);
    return GradientsExchanged::kSummed;
  }
  std::vector<GradientShard> shards;
  if (options_.gradients_in_place) read_in_place(replica, grads, vars, shards);
  else if (reducer.in_progress(vars, GradientExchange::kReduceScatter)) reducer.finish_reduce_scatter(grads, shards);
  else reducer.reduce_scatter(comm, grads, vars, shards);
  // Over several workers each one's slots of a variable go partial, also where it holds none
  // of its shards: a save then asks for them to be gathered rather than writing stale ones.
  if (options_.num_workers > 1) mark_partial(vars);
  rule->apply(vars, shards, step);
  all_gather_shards(replica, vars, shards);
  return GradientsExchanged::kApplied;
}

void ShardedUpdate::read_in_place(int replica, const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                  std::vector<GradientShard>& shards) {
  // Replicas that share memory exchange nothing: each publishes its gradients and, once all
  // are published, updates its shard reading every replica's where it lies and writing the
  // new weights into every copy (GradientShard::grads, ::copies). No bucket is packed, no sum
  // written and read back, and one barrier fewer than reduce-scatter + all-gather.
  const auto r = static_cast<std::size_t>(replica);
  GradientReducer::check(grads, vars, "the sharded update");
  published_grads_[r] = grads;
  published_vars_[r] = vars;
  group_.member(replica).barrier()->wait();  // every replica's gradients are final and published
  const int n = options_.num_local_replicas;
  // A barrier compares no arguments, as a collective does: every replica checks here that all
  // passed the same variables (each finds the same disagreement and throws), rather than read
  // past another's list. Each reads copies of the lists, which outlive a replica that throws.
  for (int q = 0; q < n; ++q) {
    const std::vector<Variable>& theirs = published_vars_[static_cast<std::size_t>(q)];
    bool same = theirs.size() == vars.size();
    for (std::size_t i = 0; same && i < vars.size(); ++i) same = theirs[i].is_same(vars[i]);
    LOCKSTEP_CHECK_T(DistributedError, same, "the sharded update: replicas disagree: replica ", q, " passed ",
                     theirs.size(), " variables", theirs.size() == vars.size() ? " (other ones)" : "", ", replica ",
                     replica, " passed ", vars.size(), "; every replica must update the same variables");
  }
  reducers_[r]->for_each_owned(vars, n, replica, [&](std::size_t i, std::int64_t b, std::int64_t e) {
    const Variable& v = vars[i];
    const std::int64_t numel = v.value().numel();
    GradientShard s{.variable = i, .begin = b, .end = e};
    for (int q = 0; q < n; ++q) {
      const Tensor& g = published_grads_[static_cast<std::size_t>(q)][i];
      if (!g.defined()) s.grads.push_back(Tensor::zeros({e - b}));  // counts as zeros, as in a bucket
      else if (g.dtype() != DType::kF32) s.grads.push_back(g.reshape({numel}).slice(b, e).to(DType::kF32));
      else s.grads.push_back(g.reshape({numel}).slice(b, e));
      if (q != replica) s.copies.push_back(v.copy(q).reshape({numel}).slice(b, e));
    }
    shards.push_back(std::move(s));
  });
}

void ShardedUpdate::all_gather_shards(int replica, const std::vector<Variable>& vars,
                                      const std::vector<GradientShard>& shards) {
  Communicator& comm = group_.member(replica);
  if (options_.num_workers > 1) {
    // The other workers' shards come through the collective; each replica writes its own copies.
    std::vector<Tensor> mine;
    mine.reserve(vars.size());
    for (const Variable& v : vars) mine.push_back(v.copy(replica));
    const int me = options_.worker_index * options_.num_local_replicas + replica;
    reducers_[static_cast<std::size_t>(replica)]->all_gather(comm, mine, [me](int m) { return m != me; });
    return;
  }
  // Nobody reads a copy between the reduce-scatter (which every replica has left before any
  // writes) and this barrier, and each element is written by its one owner: no races.
  for (const GradientShard& s : shards) {
    if (!s.copies.empty()) continue;  // the update wrote them
    const Variable& v = vars[s.variable];
    const Tensor mine = v.copy(replica).reshape({v.value().numel()}).slice(s.begin, s.end);
    for (int q = 0; q < v.num_copies(); ++q) {
      if (q == replica) continue;
      Tensor theirs = v.copy(q).reshape({v.value().numel()}).slice(s.begin, s.end);
      theirs.copy_from(mine);
    }
  }
  comm.barrier()->wait();
  // Every replica has read the gradients this one published (GradientShard::grads).
  if (options_.gradients_in_place) {
    published_grads_[static_cast<std::size_t>(replica)].clear();
    published_vars_[static_cast<std::size_t>(replica)].clear();
  }
}

void ShardedUpdate::mark_partial(const std::vector<Variable>& vars) {
  std::lock_guard<std::mutex> lock(partial_mu_);
  for (const Variable& v : vars) partial_.insert(v.identity());
}

void ShardedUpdate::check_whole(const std::vector<Variable>& vars) const {
  // Every replica of every worker finds the same: each refuses before any updates anything.
  std::lock_guard<std::mutex> lock(partial_mu_);
  if (partial_.empty()) return;
  for (const Variable& v : vars)
    LOCKSTEP_CHECK(partial_.count(v.identity()) == 0, "the slots of variable '", v.name(),
                   "' were last updated sharded over the workers (MirroredOptions::shard_optimizer_update) and this "
                   "worker holds only its shards of them; call model.gather_optimizer_slots() on every worker, then "
                   "optimizer.broadcast_slots(variable) for every variable, before updating it unsharded");
}

bool ShardedUpdate::slots_partial() const {
  std::lock_guard<std::mutex> lock(partial_mu_);
  return !partial_.empty();
}

bool ShardedUpdate::only_shards_here(const Variable& var) const {
  std::lock_guard<std::mutex> lock(partial_mu_);
  return partial_.count(var.identity()) != 0;
}

void ShardedUpdate::gather_slots(int replica, ElementwiseRule& rule) {
  const std::vector<Variable> vars = reducers_[static_cast<std::size_t>(replica)]->variables();
  if (vars.empty()) return;
  std::vector<std::vector<Tensor>> slots;
  slots.reserve(vars.size());
  for (const Variable& v : vars) slots.push_back(rule.shared_slots(v));
  for (std::size_t i = 0; i < slots.front().size(); ++i) {
    std::vector<Tensor> state;
    state.reserve(vars.size());
    for (const auto& s : slots) state.push_back(s[i]);
    all_gather_shared_state(replica, state);
  }
  std::lock_guard<std::mutex> lock(partial_mu_);
  for (const Variable& v : vars) partial_.erase(v.identity());
}

void ShardedUpdate::all_gather_shared_state(int replica, std::vector<Tensor>& state) {
  // Each shard is written once in this process: replica l writes the other workers' replicas l.
  const int local = options_.num_local_replicas, worker = options_.worker_index, l = replica;
  Communicator& comm = group_.member(replica);
  reducers_[static_cast<std::size_t>(replica)]->all_gather(
      comm, state, [=](int m) { return m / local != worker && m % local == l; });
  comm.barrier()->wait();  // every replica's writes are done before any reads
}

}  // namespace lockstep::distribute
