#include "lockstep/distribute/strategy.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "backend/kernels.hpp"
#include "backend/thread_pool.hpp"
#include "core/env.hpp"
#include "distribute/worker_transport.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

namespace {
thread_local Strategy* t_current_strategy = nullptr;

// False when the environment variable is set to 0.
bool env_flag_not_zero(const char* name) {
  return env::flag(name);
}

// MirroredOptions::shard_optimizer_update, unless $LOCKSTEP_SHARD_UPDATE is 0.
bool shard_update_wanted(bool option) { return option && env_flag_not_zero("LOCKSTEP_SHARD_UPDATE"); }
}  // namespace

// ---------------------------------------------------------------------------------------
// Replica threads. Replica 0 runs on the caller's thread (no hand-off, and one replica costs
// nothing over no strategy); replicas 1..N-1 each own a thread that waits for work.
struct Strategy::Replicas {
  struct Worker {
    std::thread thread;
    std::atomic<std::uint64_t> job{0};
  };
  Strategy* owner = nullptr;
  std::vector<std::unique_ptr<Worker>> workers;  // index r-1 for replica r
  const std::function<void(ReplicaContext&)>* fn = nullptr;
  std::atomic<int> remaining{0};
  std::atomic<bool> stop{false};
  std::atomic<int> sleepers{0};
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::mutex err_mu;
  std::exception_ptr first_error;
  int first_error_replica = -1;
  bool broken = false;

  void record_error(int r, std::exception_ptr e, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(err_mu);
      if (!first_error) {
        first_error = e;
        first_error_replica = r;
      }
    }
    owner->communicator(r).abort(what);
  }

  void execute(int r) {
    ReplicaContext ctx(*owner, r);
    backend::ContextGuard guard(owner->context(r));
    // Its waits for peers (in collectives) run chunks of its context's idle work.
    const backend::ThreadPool::HelperScope helper(&owner->context(r).pool());
    const CurrentReplicaScope current(&ctx);
    try {
      (*fn)(ctx);
    } catch (const std::exception& e) {
      record_error(r, std::current_exception(), e.what());
    } catch (...) {
      record_error(r, std::current_exception(), "unknown exception");
    }
    // A gradient exchange lives within one step: one that this step began and did not finish
    // (it threw during backward) must not be taken for the next step's.
    owner->reducers_[static_cast<std::size_t>(r)]->abandon();
  }

  void worker_loop(int r) {
    Worker& w = *workers[static_cast<std::size_t>(r - 1)];
    const auto& cpus = owner->context(r).cpus();
    if (!cpus.empty()) backend::pin_current_thread(cpus[0]);
    std::uint64_t seen = 0;
    // Between steps it gathers its slice of the next batch, if one was offered.
    const backend::ThreadPool::HelperScope helper(&owner->context(r).pool());
    for (;;) {
      // Spin briefly for the next step, then sleep.
      for (int i = 0; i < 4000 && w.job.load() == seen && !stop.load(); ++i) {
        if (backend::help_idle_work()) i = 0;
        else if (i > 100) std::this_thread::yield();
      }
      if (w.job.load() == seen && !stop.load()) {
        std::unique_lock<std::mutex> lock(mu);
        sleepers.fetch_add(1);
        cv_work.wait(lock, [&] { return w.job.load() != seen || stop.load(); });
        sleepers.fetch_sub(1);
      }
      if (stop.load()) return;
      seen = w.job.load();
      execute(r);
      if (remaining.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mu);
        cv_done.notify_all();
      }
    }
  }

  // Stops and joins the threads started so far (all of them, or fewer when starting one failed).
  void stop_threads() {
    stop.store(true);
    {
      std::lock_guard<std::mutex> lock(mu);
      cv_work.notify_all();
    }
    for (auto& w : workers) {
      if (!w->thread.joinable()) continue;
      // A replica that never finished (reported by run()) cannot be joined without hanging.
      if (broken) w->thread.detach();
      else w->thread.join();
    }
  }
};

Strategy::Strategy(StrategyLayout layout)
    : devices_(std::move(layout.devices)),
      num_workers_(layout.num_workers),
      worker_index_(layout.worker_index),
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
  for (int r = 0; r < n; ++r) reducers_.push_back(std::make_unique<GradientReducer>(layout.bucket_cap_bytes));
  no_sync_.assign(static_cast<std::size_t>(n), 0);
  // Sharding needs every copy of a variable in host memory: each replica writes its updated
  // shard into this process's other copies (one worker) or all-gathers the shards (several).
  bool all_cpu = true;
  for (const Device& d : devices_) all_cpu = all_cpu && d.kind == DeviceKind::kCpu;
  shard_update_ = shard_update_wanted(layout.shard_optimizer_update) && n * num_workers_ > 1 && all_cpu;
  // One process's replicas share the host's memory: they read each other's gradients in place
  // ($LOCKSTEP_GRADIENTS_IN_PLACE=0 reduce-scatters them as across workers; for comparisons).
  gradients_in_place_ = shard_update_ && num_workers_ == 1 && env_flag_not_zero("LOCKSTEP_GRADIENTS_IN_PLACE");
  published_grads_.resize(static_cast<std::size_t>(n));
  published_vars_.resize(static_cast<std::size_t>(n));
  // Workers may differ here: either way every bucket's collective starts in bucket order.
  overlap_gradients_ = env_flag_not_zero("LOCKSTEP_OVERLAP_GRADIENTS");
  replicas_->owner = this;
  for (int r = 1; r < n; ++r) {
    replicas_->workers.push_back(std::make_unique<Replicas::Worker>());
  }
  for (int r = 1; r < n; ++r) {
    try {
      replicas_->workers[static_cast<std::size_t>(r - 1)]->thread = std::thread([this, r] { replicas_->worker_loop(r); });
    } catch (const std::system_error& e) {
      // Out of threads or address space: the threads already started must be stopped and joined
      // here (no destructor runs for a half-made object, and a joinable std::thread that is
      // destroyed calls std::terminate).
      replicas_->stop_threads();
      throw DistributedError("cannot start the thread of replica " + std::to_string(r) + ": " + e.what() + " (" +
                             std::to_string(n) + " replicas asked for, " + std::to_string(r) +
                             " started); ask for fewer devices or raise the process's limits (ulimit -u, ulimit -v)");
    }
  }
}

Strategy::~Strategy() { replicas_->stop_threads(); }

backend::ComputeContext& Strategy::context(int replica) {
  LOCKSTEP_CHECK(replica >= 0 && replica < num_local_replicas(), "replica ", replica, " out of range");
  return *contexts_[static_cast<std::size_t>(replica)];
}

Strategy* Strategy::current() { return t_current_strategy; }

void Strategy::run_on_replicas(const std::function<void(ReplicaContext&)>& fn) {
  Replicas& R = *replicas_;
  LOCKSTEP_CHECK_T(DistributedError, !R.broken, name(),
                   ": a replica of this strategy never finished an earlier step; make a new strategy");
  LOCKSTEP_CHECK_T(DistributedError, R.remaining.load() == 0, name(), "::run is not reentrant");
  group_->reset();
  R.first_error = nullptr;
  R.first_error_replica = -1;
  R.fn = &fn;
  const int n = num_local_replicas();
  R.remaining.store(n - 1);
  for (auto& w : R.workers) w->job.fetch_add(1);
  if (R.sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(R.mu);
    R.cv_work.notify_all();
  }
  R.execute(0);
  // Wait for the other replicas. Without a failure there is no deadline (a step may be long);
  // after one, the others are released from their collectives and must stop within the timeout.
  {
    const backend::ThreadPool::HelperScope helper(&context(0).pool());
    for (int i = 0; i < 20000 && R.remaining.load() > 0; ++i) {
      if (backend::help_idle_work()) i = 0;
      else if (i > 100) std::this_thread::yield();
    }
  }
  if (R.remaining.load() > 0) {
    std::unique_lock<std::mutex> lock(R.mu);
    for (;;) {
      const bool failed = group_->failed();
      const auto deadline = failed ? group_->timeout() : std::chrono::milliseconds(200);
      const bool done = R.cv_done.wait_for(lock, deadline, [&] { return R.remaining.load() == 0; });
      if (done) break;
      if (failed) {
        R.broken = true;
        throw DistributedError(name() + ": " + std::to_string(R.remaining.load()) +
                               " replica(s) did not stop within " + std::to_string(group_->timeout().count()) +
                               " ms after replica " + std::to_string(R.first_error_replica) +
                               " failed; the strategy is unusable");
      }
    }
  }
  R.fn = nullptr;
  ++steps_run_;
  if (R.first_error) {
    std::string what;
    try {
      std::rethrow_exception(R.first_error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "unknown exception";
    }
    throw ReplicaError(R.first_error_replica,
                       "replica " + std::to_string(R.first_error_replica) + " of " + std::to_string(n) +
                           " (" + devices_[static_cast<std::size_t>(R.first_error_replica)].str() + ") failed: " + what,
                       R.first_error);
  }
}

// ---------------------------------------------------------------------------------------
int ReplicaContext::num_replicas_in_sync() const { return strategy_.num_replicas_in_sync(); }
int ReplicaContext::num_local_replicas() const { return strategy_.num_local_replicas(); }
int ReplicaContext::replica_id_in_sync_group() const {
  return strategy_.worker_index() * strategy_.num_local_replicas() + replica_id_;
}
const Device& ReplicaContext::device() const {
  return strategy_.devices()[static_cast<std::size_t>(replica_id_)];
}

Communicator& ReplicaContext::communicator() { return strategy_.communicator(replica_id_); }

Tensor ReplicaContext::all_reduce(ReduceOp op, const Tensor& value) {
  LOCKSTEP_CHECK(value.defined(), "ReplicaContext::all_reduce: the value is an undefined tensor");
  Tensor out = value.clone();
  communicator().all_reduce(out, op)->wait();
  return out;
}

bool ReplicaContext::all_reduce_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars) {
  const auto r = static_cast<std::size_t>(replica_id_);
  if (strategy_.no_sync_[r]) {
    strategy_.held_back_.add(grads, vars);
    return false;
  }
  if (!strategy_.held_back_.empty()) grads = strategy_.held_back_.take(grads, vars);
  GradientReducer& reducer = *strategy_.reducers_[r];
  if (reducer.in_progress(vars, GradientExchange::kAllReduce)) reducer.finish_all_reduce(grads);
  else reducer.all_reduce(communicator(), grads, vars);
  return true;
}

GradientReadyFn ReplicaContext::begin_gradient_exchange(const std::vector<Variable>& vars, GradientExchange kind) {
  const auto r = static_cast<std::size_t>(replica_id_);
  // Gradients read in place (reduce_scatter_gradients) are not exchanged: nothing to start early.
  if (!strategy_.overlap_gradients_ || strategy_.no_sync_[r] || !strategy_.held_back_.empty() ||
      num_replicas_in_sync() == 1 || (kind == GradientExchange::kReduceScatter && strategy_.gradients_in_place_))
    return {};
  GradientReducer& reducer = *strategy_.reducers_[r];
  reducer.begin(communicator(), vars, kind);
  return [&reducer](std::size_t i, const Tensor& grad) { reducer.ready(i, grad); };
}

bool ReplicaContext::shards_update(const std::vector<Variable>& vars) const {
  if (!strategy_.shard_update_) return false;
  const int n = strategy_.num_local_replicas();
  for (const Variable& v : vars)
    if (v.num_copies() != n || v.value().dtype() != DType::kF32) return false;
  return true;
}

bool ReplicaContext::reduce_scatter_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                              std::vector<GradientShard>& shards) {
  const auto r = static_cast<std::size_t>(replica_id_);
  shards.clear();
  if (strategy_.no_sync_[r]) {
    strategy_.held_back_.add(grads, vars);
    return false;
  }
  if (!strategy_.held_back_.empty()) grads = strategy_.held_back_.take(grads, vars);
  GradientReducer& reducer = *strategy_.reducers_[r];
  if (strategy_.gradients_in_place_) {
    // Replicas that share memory exchange nothing: each publishes its gradients and, once all
    // are published, updates its shard reading every replica's where it lies and writing the
    // new weights into every copy (GradientShard::parts, ::copies). No bucket is packed, no sum
    // written and read back, and one barrier fewer than reduce-scatter + all-gather.
    GradientReducer::check(grads, vars, "reduce_scatter_gradients");
    strategy_.published_grads_[r] = grads;
    strategy_.published_vars_[r] = vars;
    communicator().barrier()->wait();  // every replica's gradients are final and published
    const int n = num_local_replicas();
    // A barrier compares no arguments, as a collective does: every replica checks here that all
    // passed the same variables (each finds the same disagreement and throws), rather than read
    // past another's list. Each reads copies of the lists, which outlive a replica that throws.
    for (int q = 0; q < n; ++q) {
      const std::vector<Variable>& theirs = strategy_.published_vars_[static_cast<std::size_t>(q)];
      bool same = theirs.size() == vars.size();
      for (std::size_t i = 0; same && i < vars.size(); ++i) same = theirs[i].is_same(vars[i]);
      LOCKSTEP_CHECK_T(DistributedError, same, "reduce_scatter_gradients: replicas disagree: replica ", q, " passed ",
                       theirs.size(), " variables", theirs.size() == vars.size() ? " (other ones)" : "", ", replica ",
                       replica_id_, " passed ", vars.size(), "; every replica must update the same variables");
    }
    reducer.for_each_owned(vars, n, replica_id_, [&](std::size_t i, std::int64_t b, std::int64_t e) {
      const Variable& v = vars[i];
      const std::int64_t numel = v.value().numel();
      GradientShard s{.variable = i, .begin = b, .end = e};
      for (int q = 0; q < n; ++q) {
        const Tensor& g = strategy_.published_grads_[static_cast<std::size_t>(q)][i];
        if (!g.defined()) s.parts.push_back(Tensor::zeros({e - b}));  // counts as zeros, as in a bucket
        else if (g.dtype() != DType::kF32) s.parts.push_back(g.reshape({numel}).slice(b, e).to(DType::kF32));
        else s.parts.push_back(g.reshape({numel}).slice(b, e));
        if (q != replica_id_) s.copies.push_back(v.copy(q).reshape({numel}).slice(b, e));
      }
      shards.push_back(std::move(s));
    });
    return true;
  }
  if (reducer.in_progress(vars, GradientExchange::kReduceScatter)) reducer.finish_reduce_scatter(grads, shards);
  else reducer.reduce_scatter(communicator(), grads, vars, shards);
  return true;
}

void ReplicaContext::all_gather_shards(const std::vector<Variable>& vars, const std::vector<GradientShard>& shards) {
  if (strategy_.num_workers_ > 1) {
    // The other workers' shards come through the collective; each replica writes its own copies.
    std::vector<Tensor> mine;
    mine.reserve(vars.size());
    for (const Variable& v : vars) mine.push_back(v.copy(replica_id_));
    const int me = replica_id_in_sync_group();
    strategy_.reducers_[static_cast<std::size_t>(replica_id_)]->all_gather(communicator(), mine,
                                                                           [me](int m) { return m != me; });
    return;
  }
  // Nobody reads a copy between the reduce-scatter (which every replica has left before any
  // writes) and this barrier, and each element is written by its one owner: no races.
  for (const GradientShard& s : shards) {
    if (!s.copies.empty()) continue;  // the update wrote them
    const Variable& v = vars[s.variable];
    const Tensor mine = v.copy(replica_id_).reshape({v.value().numel()}).slice(s.begin, s.end);
    for (int q = 0; q < v.num_copies(); ++q) {
      if (q == replica_id_) continue;
      Tensor theirs = v.copy(q).reshape({v.value().numel()}).slice(s.begin, s.end);
      theirs.copy_from(mine);
    }
  }
  communicator().barrier()->wait();
  // Every replica has read the gradients this one published (GradientShard::parts).
  if (strategy_.gradients_in_place_) {
    strategy_.published_grads_[static_cast<std::size_t>(replica_id_)].clear();
    strategy_.published_vars_[static_cast<std::size_t>(replica_id_)].clear();
  }
}

std::vector<Variable> ReplicaContext::sharded_variables() const {
  return strategy_.reducers_[static_cast<std::size_t>(replica_id_)]->variables();
}

void ReplicaContext::all_gather_shared_state(std::vector<Tensor>& state) {
  // Each shard is written once in this process: replica l writes the other workers' replicas l.
  const int local = strategy_.num_local_replicas(), worker = strategy_.worker_index(), l = replica_id_;
  strategy_.reducers_[static_cast<std::size_t>(replica_id_)]->all_gather(
      communicator(), state, [=](int m) { return m / local != worker && m % local == l; });
  communicator().barrier()->wait();  // every replica's writes are done before any reads
}

std::int64_t ReplicaContext::first_example() const {
  const DistributedBatch* b = strategy_.batch_in_step_;
  return b ? b->offsets[static_cast<std::size_t>(replica_id_)] : 0;
}
std::int64_t ReplicaContext::global_batch_size() const {
  const DistributedBatch* b = strategy_.batch_in_step_;
  return b ? b->global_size : 0;
}
std::uint64_t ReplicaContext::step_index() const { return strategy_.steps_run_; }

ReplicaContext* get_replica_context() {
  // Only ReplicaContext implements ReplicaInterface in this library; a test double would not be
  // a distribute-layer replica, so this asks rather than assumes.
  return dynamic_cast<ReplicaContext*>(current_replica());
}

NoSyncScope ReplicaContext::no_sync(bool enabled) { return NoSyncScope(strategy_, replica_id_, enabled); }

NoSyncScope::NoSyncScope(Strategy& strategy, int replica_id, bool enabled)
    : strategy_(strategy), replica_id_(replica_id),
      previous_(strategy.no_sync_[static_cast<std::size_t>(replica_id)] != 0) {
  if (enabled) strategy_.no_sync_[static_cast<std::size_t>(replica_id_)] = 1;
}
NoSyncScope::~NoSyncScope() { strategy_.no_sync_[static_cast<std::size_t>(replica_id_)] = previous_ ? 1 : 0; }

const GradientReducer& Strategy::gradient_reducer(int replica) const {
  LOCKSTEP_CHECK(replica >= 0 && replica < num_local_replicas(), "replica ", replica, " out of range");
  return *reducers_[static_cast<std::size_t>(replica)];
}

StrategyScope::StrategyScope(Strategy& strategy)
    : strategy_(strategy), mirror_(strategy.contexts()), previous_(t_current_strategy) {
  t_current_strategy = &strategy;
}
StrategyScope::~StrategyScope() { t_current_strategy = previous_; }

// ---------------------------------------------------------------------------------------
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
}  // namespace

data::Element to_current_device(const data::Element& element) {
  const Device here = backend::current_context().device();
  data::Element out = element;
  for (auto& t : out)
    if (t.defined() && t.device().kind != here.kind) t = t.to(here);
  return out;
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& replica_values, std::optional<int> axis) const {
  LOCKSTEP_CHECK(replica_values.size() > 0, "Strategy::reduce: no values");
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
    const Tensor v = values[r].dtype() == DType::kF32 ? values[r] : values[r].to(DType::kF32);
    acc = op == ReduceOp::kMax ? maximum(acc, v) : op == ReduceOp::kMin ? minimum(acc, v) : add(acc, v);
  }
  if (op == ReduceOp::kMean) acc = scale(acc, 1.0f / static_cast<float>(values.size()));
  return acc;
}

Tensor Strategy::gather(const PerReplica<Tensor>& values, int axis) const {
  LOCKSTEP_CHECK(values.size() > 0, "Strategy::gather: no values");
  LOCKSTEP_CHECK(axis == 0, "Strategy::gather: only axis 0 is supported, got ", axis);
  if (num_workers_ > 1) return gather_across_workers(values);
  return concat(on_host(values).values(), 0);
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
    Tensor t = axis ? sum(v.dtype() == DType::kF32 ? v : v.to(DType::kF32), *axis)
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

Tensor Strategy::gather_across_workers(const PerReplica<Tensor>& values) const {
  LOCKSTEP_CHECK(static_cast<int>(values.size()) == num_local_replicas(), "Strategy::gather: ", values.size(),
                 " values for ", num_local_replicas(), " local replicas");
  const Tensor& first = values[0];
  LOCKSTEP_CHECK(first.rank() >= 1, "Strategy::gather: values must have a batch axis");
  const std::int64_t row = first.numel() / std::max<std::int64_t>(1, first.dim(0));
  const int n = num_replicas_in_sync();
  Strategy* self = replicas_->owner;
  // Row counts first (they may differ), then every replica's rows padded to the longest.
  std::vector<Tensor> all_rows(values.size());
  self->run_on_replicas([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.local_replica_id());
    Tensor mine = Tensor::full({1}, static_cast<float>(values[r].dim(0)));
    Tensor out = Tensor::empty({n}, DType::kF32);
    ctx.communicator().all_gather(mine, out)->wait();
    all_rows[r] = out;
  });
  std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
  std::int64_t longest = 0;
  for (int j = 0; j < n; ++j) {
    rows[static_cast<std::size_t>(j)] = static_cast<std::int64_t>(all_rows[0].slice(j, j + 1).item());
    longest = std::max(longest, rows[static_cast<std::size_t>(j)]);
  }
  std::vector<Tensor> gathered(values.size());
  self->run_on_replicas([&](ReplicaContext& ctx) {
    const auto r = static_cast<std::size_t>(ctx.local_replica_id());
    const Tensor& v = values[r];
    LOCKSTEP_CHECK(v.dtype() == first.dtype() && v.numel() == v.dim(0) * row, "Strategy::gather: replica ", r,
                   " has ", v.shape().str(), " ", dtype_name(v.dtype()), ", replica 0 has ", first.shape().str(), " ",
                   dtype_name(first.dtype()));
    Tensor padded = Tensor::zeros({longest * row}, v.dtype());
    if (v.numel() > 0) padded.slice(0, v.numel()).copy_from(v.reshape(Shape{v.numel()}));
    Tensor out = Tensor::empty({longest * row * n}, v.dtype());
    ctx.communicator().all_gather(padded, out)->wait();
    gathered[r] = out;
  });
  std::vector<Tensor> parts;
  for (int j = 0; j < n; ++j) {
    const std::int64_t b = j * longest * row;
    std::vector<std::int64_t> dims = first.shape().dims();
    dims[0] = rows[static_cast<std::size_t>(j)];
    parts.push_back(gathered[0].slice(b, b + dims[0] * row).reshape(Shape(dims)));
  }
  return concat(parts, 0);
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

std::unique_ptr<Strategy::DistributedIterator> Strategy::DistributedDataset::make_iterator() const {
  return std::make_unique<DistributedIterator>(dataset_.make_iterator(), replicas_, per_replica_batches_, first_replica_,
                                               local_replicas_);
}

Strategy::DistributedDataset Strategy::experimental_distribute_dataset(const data::Dataset& dataset) const {
  return DistributedDataset(dataset, num_replicas_in_sync(), false, worker_index_ * num_local_replicas(),
                            num_local_replicas());
}

Strategy::DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const data::InputContext&)>& fn) const {
  // One input pipeline per worker, feeding that worker's replicas.
  data::InputContext ctx{.num_input_pipelines = num_workers_,
                         .input_pipeline_id = worker_index_,
                         .num_replicas_in_sync = num_replicas_in_sync()};
  ctx.validate();
  return DistributedDataset(fn(ctx), num_local_replicas(), /*per_replica_batches=*/true);
}

std::optional<Strategy::DistributedIterator::Batch> Strategy::DistributedIterator::next_per_replica() {
  Batch b;
  for (int r = 0; r < replicas_; ++r) {
    auto e = it_->next();
    if (!e) {
      // A partial step would leave replicas without input: drop it, as a short final round.
      if (r == 0) return std::nullopt;
      std::fprintf(stderr, "WARNING: distribute_datasets_from_function: the input ended after %d of %d replicas' "
                   "batches; the incomplete step is dropped\n", r, replicas_);
      return std::nullopt;
    }
    LOCKSTEP_CHECK(!e->empty() && (*e)[0].rank() >= 1, "distribute_datasets_from_function: elements must be batches");
    b.offsets.push_back(b.global_size);
    b.global_size += (*e)[0].dim(0);
    b.slices.values().push_back(std::move(*e));
  }
  return b;
}

std::optional<Strategy::DistributedIterator::Batch> Strategy::DistributedIterator::next() {
  if (per_replica_batches_) return next_per_replica();
  auto e = it_->next();
  if (!e) return std::nullopt;
  Batch b;
  auto slices = data::split_batch_for_replicas(*e, replicas_);
  for (int r = 0; r < replicas_; ++r) {
    auto& slice = slices[static_cast<std::size_t>(r)];
    const std::int64_t rows = slice[0].dim(0);
    if (r >= first_replica_ && r < first_replica_ + local_replicas_) {
      b.offsets.push_back(b.global_size);
      b.slices.values().push_back(std::move(slice));
    }
    b.global_size += rows;
  }
  return b;
}

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

// ---------------------------------------------------------------------------------------
int default_num_cpu_devices() {
  if (const auto n = env::integer("LOCKSTEP_CPU_DEVICES")) return static_cast<int>(*n);
  return std::min(backend::available_cores(), backend::default_cpu_threads());
}

namespace {
using Layout = StrategyLayout;

Layout cpu_layout(const std::vector<int>& indices, int num_devices, bool pin) {
  // LOCKSTEP_CPU_THREADS caps the cores that replicas share (as it caps the default device).
  std::vector<int> ids = backend::available_cpu_ids();
  ids.resize(std::min(ids.size(), static_cast<std::size_t>(backend::default_cpu_threads())));
  const int cores = static_cast<int>(ids.size());
  Layout l;
  const int n = static_cast<int>(indices.size());
  if (n > cores) {
    std::fprintf(stderr,
                 "WARNING: %d logical CPU devices share %d core(s): replicas will time-slice the cores, so steps "
                 "are slower than with %d devices\n",
                 n, cores, cores);
  }
  const int per = std::max(1, cores / std::max(1, num_devices));
  for (int i = 0; i < n; ++i) {
    const int idx = indices[static_cast<std::size_t>(i)];
    l.devices.push_back(Device{DeviceKind::kCpu, idx});
    l.threads.push_back(per);
    std::vector<int> mine;
    if (pin && num_devices <= cores) {
      for (int k = 0; k < per; ++k) mine.push_back(ids[static_cast<std::size_t>(idx * per + k)]);
    }
    l.cpus.push_back(std::move(mine));
  }
  return l;
}

// "gpu:0x4" -> four entries gpu:0; anything else as it is.
std::vector<std::string> expand_logical(const std::vector<std::string>& devices) {
  std::vector<std::string> out;
  for (const auto& s : devices) {
    const std::size_t x = s.rfind('x');
    const bool gpu = s.rfind("gpu:", 0) == 0 || s.rfind("GPU:", 0) == 0 || s.rfind("cuda:", 0) == 0;
    if (!gpu || x == std::string::npos || x < s.find(':')) {
      out.push_back(s);
      continue;
    }
    const std::string count = s.substr(x + 1);
    char* end = nullptr;
    const long n = std::strtol(count.c_str(), &end, 10);
    LOCKSTEP_CHECK(!count.empty() && *end == '\0' && n >= 1 && n <= 64, "device '", s,
                   "': logical devices on a GPU are written gpu:N xK with K in [1, 64], e.g. gpu:0x4");
    for (long i = 0; i < n; ++i) out.push_back(s.substr(0, x));
  }
  return out;
}

// Replicas on GPUs: one thread each (the GPU computes). Replicas sharing a GPU enqueue on its
// one stream, so the shared-memory group's combine kernels see each other's tensors in order;
// replicas on distinct GPUs go through NCCL.
Layout gpu_layout(const std::vector<int>& gpus, const MirroredOptions& o) {
  const int count = backend::cuda_device_count();
  for (int g : gpus) {
    LOCKSTEP_CHECK(g < count, "device 'gpu:", g, "' does not exist: this machine has ", count, " GPU(s)",
                   (count == 0 ? " (or lockstep was built without CUDA)" : ""));
  }
  LOCKSTEP_CHECK(backend::backend_available(DeviceKind::kCuda), "MirroredStrategy on GPUs: this lockstep was built "
                 "without CUDA (LOCKSTEP_WITH_CUDA=OFF)");
  std::vector<int> distinct;
  bool shared = false;
  for (int g : gpus) {
    if (std::find(distinct.begin(), distinct.end(), g) == distinct.end()) distinct.push_back(g);
    else shared = true;
  }
  Layout l;
  for (int g : gpus) {
    l.devices.push_back(Device{DeviceKind::kCuda, g});
    l.threads.push_back(1);
    l.cpus.emplace_back();
  }
  l.memory_limit = o.gpu_memory_limit;
  l.timeout = o.collective_timeout;
  l.bucket_cap_bytes = o.bucket_cap_bytes;
  l.shard_optimizer_update = o.shard_optimizer_update;
  l.cross_device_ops = o.cross_device_ops;
  if (distinct.size() > 1) {
    LOCKSTEP_CHECK(!shared, "MirroredStrategy: replicas on ", distinct.size(), " GPUs with some GPU holding several "
                   "(logical devices): NCCL needs one replica per GPU and replicas sharing a GPU reduce through its "
                   "memory; use one replica per GPU, or all replicas on one GPU");
    LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kLoopback, "MirroredStrategy: cross_device_ops "
                   "loopback works on one GPU only; replicas on several GPUs all-reduce over NCCL");
    // Emulated GPUs (LOCKSTEP_EMULATED_GPUS) have host memory and no NCCL: the shared-memory group
    // reduces them, so that the rest of a layout over several GPUs is tested without one.
    l.cross_device_ops =
        backend::gpus_emulated() ? CollectiveImplementation::kSharedMemory : CollectiveImplementation::kNccl;
  } else if (o.cross_device_ops == CollectiveImplementation::kNccl) {
    LOCKSTEP_CHECK(!shared, "MirroredStrategy: cross_device_ops nccl needs one replica per GPU (NCCL cannot have two "
                   "ranks on one GPU); replicas sharing a GPU use shared_memory");
  }
  return l;
}

bool cpu_devices_asked(const MirroredOptions& o) {
  return o.num_cpu_devices > 0 || env::is_set("LOCKSTEP_CPU_DEVICES");
}

Layout mirrored_layout(const MirroredOptions& o) {
  LOCKSTEP_CHECK(o.num_cpu_devices >= 0 && o.num_cpu_devices <= kMaxCpuDevices, "MirroredStrategy: ",
                 o.num_cpu_devices, " logical CPU devices asked for; the count must be in [1, ", kMaxCpuDevices,
                 "] (0: the default)");
  LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kMpi,
                 "MirroredStrategy: cross_device_ops kMpi spans workers; use MultiWorkerMirroredStrategy");
  const int num_cpu = o.num_cpu_devices > 0 ? o.num_cpu_devices : default_num_cpu_devices();
  std::vector<int> cpu_indices;
  std::vector<int> gpu_indices;
  for (const auto& s : expand_logical(o.devices)) {
    const Device d = Device::parse(s);
    if (d.kind == DeviceKind::kCpu) {
      LOCKSTEP_CHECK(d.index < num_cpu, "device '", s, "' does not exist: there are ", num_cpu,
                     " logical CPU devices (cpu:0 .. cpu:", num_cpu - 1, "; set num_cpu_devices or LOCKSTEP_CPU_DEVICES)");
      cpu_indices.push_back(d.index);
    } else {
      gpu_indices.push_back(d.index);
    }
  }
  LOCKSTEP_CHECK(cpu_indices.empty() || gpu_indices.empty(), "MirroredStrategy: devices mix CPUs and GPUs; mirror over "
                 "one kind");
  if (o.devices.empty() && !cpu_devices_asked(o)) {
    // Every local GPU (TF's default); the CPU devices only when there is none.
    const int gpus = backend::backend_available(DeviceKind::kCuda) ? backend::cuda_device_count() : 0;
    for (int g = 0; g < gpus; ++g) gpu_indices.push_back(g);
    if (gpus == 0 && backend::backend_available(DeviceKind::kCuda)) {
      static std::once_flag notice;
      std::call_once(notice, [] {
        std::fprintf(stderr, "MirroredStrategy: no GPU visible; mirroring over the logical CPU devices\n");
      });
    }
  }
  if (!gpu_indices.empty()) return gpu_layout(gpu_indices, o);
  LOCKSTEP_CHECK(o.cross_device_ops != CollectiveImplementation::kNccl,
                 "MirroredStrategy: cross_device_ops nccl is for GPU replicas; these are CPU devices");
  for (std::size_t i = 0; i < cpu_indices.size(); ++i)
    for (std::size_t j = i + 1; j < cpu_indices.size(); ++j)
      LOCKSTEP_CHECK(cpu_indices[i] != cpu_indices[j], "device 'cpu:", cpu_indices[i], "' is listed twice");
  if (cpu_indices.empty())
    for (int i = 0; i < num_cpu; ++i) cpu_indices.push_back(i);
  Layout l = cpu_layout(cpu_indices, num_cpu, o.pin_threads);
  l.timeout = o.collective_timeout;
  l.cross_device_ops = o.cross_device_ops;
  l.bucket_cap_bytes = o.bucket_cap_bytes;
  l.shard_optimizer_update = o.shard_optimizer_update;
  return l;
}

Layout one_device_layout(const std::string& device) {
  const Device d = Device::parse(device);
  if (d.kind == DeviceKind::kCuda) {
    MirroredOptions o;
    return gpu_layout({d.index}, o);
  }
  Layout l;
  l.devices = {d};
  l.threads = {backend::default_cpu_threads()};
  l.cpus = {{}};
  return l;
}

Layout multi_worker_layout(const MultiWorkerOptions& o) {
  MirroredOptions local = o.local;
  local.cross_device_ops = CollectiveImplementation::kSharedMemory;
  Layout l = mirrored_layout(local);
  const bool launched = launched_under_mpi();
  if (!launched || !built_with_mpi()) {
    if (o.notice || launched)
      std::fprintf(stderr, "MultiWorkerMirroredStrategy: %s; training as MirroredStrategy on one worker\n",
                   launched ? "lockstep was built without MPI (LOCKSTEP_WITH_MPI=OFF)" : "not launched under MPI (mpirun)");
    return l;
  }
  // GPU replicas across workers: each worker's replicas on one GPU (one process per GPU, as
  // mpirun -np G runs it; or logical replicas gpu:KxN). They combine through that GPU's memory,
  // and across workers through host copies over MPI (MultiWorkerGroup stages device tensors);
  // NCCL across processes is not built, and replicas on several GPUs of one worker would need it.
  if (l.devices.front().kind != DeviceKind::kCpu) {
    for (const Device& d : l.devices)
      LOCKSTEP_CHECK(d == l.devices.front(), "MultiWorkerMirroredStrategy: this worker's replicas are on ",
                     l.devices.front().str(), " and ", d.str(), "; across workers each worker's replicas must share "
                     "one GPU (run one worker per GPU: --devices gpu:K), since NCCL across processes is not built");
  }
  WorkerTransport& world = WorkerTransport::world();
  l.num_workers = world.size();
  l.worker_index = world.rank();
  l.cross_device_ops = CollectiveImplementation::kMpi;
  // The workers shard the optimizer update alike: one whose options or LOCKSTEP_SHARD_UPDATE say
  // no turns it off for all (else its all-reduce would meet the others' reduce-scatter at the
  // first step). A tag above the collective groups' (multi_worker_group.cpp: 1..32000).
  constexpr int kLayoutTag = 32500;
  const auto deadline = std::chrono::steady_clock::now() + local.collective_timeout;
  const WorkerTransport::Bytes mine{std::byte{shard_update_wanted(l.shard_optimizer_update) ? std::uint8_t{1} : std::uint8_t{0}}};
  for (const auto& theirs : world.all_to_all(kLayoutTag, mine, deadline, local.collective_timeout, "the strategy's set-up"))
    l.shard_optimizer_update = l.shard_optimizer_update && theirs.at(0) == std::byte{1};
  return l;
}
}  // namespace

MirroredStrategy::MirroredStrategy(const MirroredOptions& o) : Strategy(mirrored_layout(o)) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(const MultiWorkerOptions& o) : Strategy(multi_worker_layout(o)) {}

OneDeviceStrategy::OneDeviceStrategy(const std::string& device) : Strategy(one_device_layout(device)) {}

}  // namespace lockstep::distribute
