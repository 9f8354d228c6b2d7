#pragma once
// Strategies, as tf.distribute: how many replicas train in sync and on which devices.
//
//   lockstep::distribute::MirroredStrategy strategy;      // every local device
//   auto guard = strategy.scope();                        // variables made now are mirrored
//   auto per_replica = strategy.run([&](ReplicaContext& ctx) { ...; return loss; });
//   Tensor total = strategy.reduce(ReduceOp::kSum, per_replica);
//
// TensorFlow's custom loop: strategy.run(fn, batch) hands each replica its slice of a
// distributed batch; inside, model(x, {.training = true}), compute_average_loss(per_example)
// and optimizer->apply_gradients(...) (which all-reduces and counts the step once) work as in TF.
//
// Each replica is a thread bound to its device's compute context (its own allocator and its
// own share of the cores). A strategy is an ordinary object: two can live in one process.
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/core/device.hpp"
#include "lockstep/core/error.hpp"
#include "lockstep/data/dataset.hpp"
#include "lockstep/data/input_context.hpp"
#include "lockstep/distribute/collective_group.hpp"
#include "lockstep/distribute/distributed_batch.hpp"
#include "lockstep/distribute/gradient_accumulator.hpp"
#include "lockstep/distribute/gradient_reducer.hpp"
#include "lockstep/distribute/per_replica.hpp"
#include "lockstep/distribute/reduce_op.hpp"
#include "lockstep/distribute/sharded_update.hpp"
#include "lockstep/tensor/compute_context.hpp"


namespace lockstep::distribute {

class Strategy;
class NoSyncScope;

/// How a distributed iterator reads its dataset (Strategy::DistributedDataset).
struct DistributedInputOptions {
  /// Replicas in sync; this worker keeps the slices of local_replicas of them from
  /// first_replica (-1: all).
  int replicas = 1;
  int first_replica = 0;
  int local_replicas = -1;
  /// The dataset yields per-replica batches, `replicas` consecutive ones making a step
  /// (distribute_datasets_from_function); otherwise it yields global batches to split.
  bool per_replica_batches = false;
  /// Batches of rows (data::RowBatch) where the pipeline has them: each replica gathers its own
  /// slice on its own thread. For replicas that keep every core busy, and replicas on GPUs
  /// (which gather the rows as stored and cast them on the device).
  bool row_batches = false;
  /// Elements are read one ahead too (for the copies ahead to GPUs).
  bool peek_elements = false;
  /// Each step's replicas prepare their slices of the next batch (DistributedBatch::ahead).
  bool read_ahead = true;
  /// Replicas on GPUs have the input worker gather their slices of the next batch
  /// (data::RowBatch::gather_stored_ahead) while they queue a step, rather than gather them.
  bool gather_on_worker = true;
  /// ...into the staging blocks that their copy to the device reads (one host copy fewer); false
  /// gathers them into host memory first (for comparisons: the same bits either way).
  bool gather_into_staging = true;
  /// Every global batch must split over the replicas (data::check_splittable).
  bool check_splittable = true;
};

/// What a replica function sees (tf.distribute.ReplicaContext). Layers see it through
/// ReplicaInterface (layers::CallContext::replica).
class ReplicaContext final : public ReplicaInterface {
 public:
  /// local_replica: the replica's index among this worker's replicas.
  ReplicaContext(Strategy& strategy, int local_replica) : strategy_(strategy), replica_id_(local_replica) {}
  /// replica_id_in_sync_group: across every worker, worker_index() * (replicas per worker) +
  /// local_replica_id().
  ReplicaIds ids() const override;
  ReplicaPosition position() const override;
  /// The replica's index among this worker's replicas (run()'s results are in this order).
  int local_replica_id() const { return replica_id_; }
  const Device& device() const;
  /// All-reduce across the replicas of this strategy (any dtype the collectives support);
  /// every replica must call it in the same order with the same element count and dtype.
  /// Returns a new tensor on this replica's device.
  Tensor all_reduce(ReduceOp op, const Tensor& value) override;
  /// The strategy's ShardedUpdate does it. Without a rule, or where the update is not sharded:
  /// the gradients of `vars` are summed over the replicas, bucketed (GradientReducer: one
  /// collective per bucket of at most MirroredOptions::bucket_cap_bytes, started as soon as it
  /// is packed), replacing `grads` with the sums (views of the bucket buffers). Sharded: the
  /// same buckets are reduce-scattered (same sums), or on one worker every replica's gradients
  /// are read where they lie by the update (MirroredOptions::gradients_in_place turns that off,
  /// for comparisons), the same sums, bit for bit; the rule updates this replica's ranges and the
  /// ranges reach every copy. An undefined gradient counts as zeros. Gradients held back by
  /// no_sync() are added in first; under no_sync() it only adds `grads` to them.
  GradientsExchanged exchange_gradients(std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                                        ElementwiseRule* rule, std::int64_t step) override;
  /// Empty also with one replica in sync (nothing to exchange), and when
  /// MirroredOptions::overlap_gradients is false (every exchange then starts after the backward
  /// pass; for comparisons).
  GradientReadyFn begin_gradient_exchange(const std::vector<Variable>& vars, ElementwiseRule* rule) override;
  /// True when MirroredOptions::shard_optimizer_update is on (on every worker), this strategy
  /// has more than one replica (on one worker or several), CPU devices only, and every variable in `vars` is float32 (and mirrored over the local replicas): then an
  /// optimizer with an elementwise rule has its update sharded.
  bool shards_update(const std::vector<Variable>& vars) const;
  /// PyTorch DDP's no_sync(), for gradient accumulation in a custom loop: while the scope
  /// lives, all_reduce_gradients() sums this replica's gradients locally; the first call after
  /// it all-reduces the sums of the whole group. Every replica must open it for the same
  /// micro-steps. The sums are kept by the strategy, so a group may span several run() calls.
  /// `enabled` = false gives a scope that does nothing: `auto quiet = rc.no_sync(micro + 1 < k);`
  [[nodiscard]] NoSyncScope no_sync(bool enabled = true);
  /// This replica's member of the strategy's collective group, for collectives of its own.
  Communicator& communicator();
  Strategy& strategy() { return strategy_; }

 private:
  Strategy& strategy_;
  int replica_id_;  // local
};

/// RAII guard from ReplicaContext::no_sync().
class NoSyncScope {
 public:
  NoSyncScope(Strategy& strategy, int replica_id, bool enabled);
  ~NoSyncScope();
  NoSyncScope(NoSyncScope&&) = delete;

 private:
  Strategy& strategy_;
  int replica_id_;
  bool previous_;
};

/// The error run() throws when a replica function threw: names the replica and keeps the
/// original exception (nested()).
class ReplicaError : public DistributedError {
 public:
  ReplicaError(int replica_id, const std::string& what, std::exception_ptr nested)
      : DistributedError(what), replica_id_(replica_id), nested_(std::move(nested)) {}
  int replica_id() const { return replica_id_; }
  const std::exception_ptr& nested() const { return nested_; }

 private:
  int replica_id_;
  std::exception_ptr nested_;
};

/// RAII guard returned by Strategy::scope(): variables created while it lives are mirrored.
class StrategyScope {
 public:
  explicit StrategyScope(Strategy& strategy);
  ~StrategyScope();
  StrategyScope(StrategyScope&&) = delete;
  Strategy& strategy() { return strategy_; }

 private:
  Strategy& strategy_;
  MirrorScope mirror_;
  Strategy* previous_;
};

/// Where a strategy's replicas run: a device, a thread count and (optionally) the cores to
/// pin to, per replica.
struct StrategyLayout {
  std::vector<Device> devices;
  std::vector<int> threads;
  std::vector<std::vector<int>> cpus;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  CollectiveImplementation cross_device_ops = CollectiveImplementation::kSharedMemory;
  std::size_t bucket_cap_bytes = GradientReducer::kDefaultBucketCapBytes;
  bool shard_optimizer_update = true;
  /// MirroredOptions::overlap_gradients, gradients_in_place and check_mirrored.
  bool overlap_gradients = true;
  bool gradients_in_place = true;
  bool check_mirrored = false;
  /// Processes training in sync (each with these devices) and this one's index among them;
  /// more than one needs cross_device_ops = kMpi.
  int num_workers = 1;
  int worker_index = 0;
  /// GPU contexts: each holds at most this many bytes (0: no limit but the GPU's).
  std::uint64_t memory_limit = 0;
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  /// Replicas in sync across every worker (tf.distribute's num_replicas_in_sync).
  int num_replicas_in_sync() const { return num_local_replicas() * num_workers_; }
  /// This worker's replicas: one per device in devices().
  int num_local_replicas() const { return static_cast<int>(devices_.size()); }
  /// The processes that train in sync (MultiWorkerMirroredStrategy; 1 for the others) and
  /// this one's index among them; the chief, worker 0, is the one that writes files.
  int num_workers() const { return num_workers_; }
  int worker_index() const { return worker_index_; }
  bool is_chief() const { return worker_index_ == 0; }
  /// For start-up checks that the workers run alike: every worker's `mine` (of any length), in
  /// worker order, this worker's own at its index; {mine} on one worker. Every worker must call
  /// it alike, outside run(); a worker still missing after the collective timeout is named in
  /// the DistributedError, which says `what` was being exchanged.
  std::vector<std::string> gather_from_workers(const std::string& what, const std::string& mine) const;
  /// The same for one integer (one exchange of 8 bytes: cheap enough for each step boundary).
  std::vector<std::int64_t> gather_int_from_workers(const std::string& what, std::int64_t mine) const;
  /// This worker failed with `why` (an error of its own, which the others cannot see): tells the
  /// other workers, whose current or next exchange then throws DistributedError naming this
  /// worker and `why` instead of waiting the collective timeout for it, and makes MPI abort the
  /// job when this process exits. Nothing on one worker, or where the job's transport failed
  /// already. Never throws.
  void announce_failure(const std::string& why) const noexcept;
  /// This worker's devices, one per local replica.
  const std::vector<Device>& devices() const { return devices_; }
  virtual std::string name() const = 0;
  /// Variables created while the guard lives are mirrored on every replica's device.
  [[nodiscard]] StrategyScope scope() { return StrategyScope(*this); }
  /// The strategy whose scope is open on this thread, or null.
  static Strategy* current();

  /// Runs fn once per local replica, each on its replica's thread and device, and waits for
  /// all; the results are this worker's, in local replica order.
  /// When a replica throws, the others are released from any collective they wait in, and
  /// ReplicaError (naming the replica) is thrown here once every replica has stopped.
  template <typename F>
  auto run(F&& fn) -> PerReplica<std::invoke_result_t<F&, ReplicaContext&>> {
    using R = std::invoke_result_t<F&, ReplicaContext&>;
    std::vector<std::optional<R>> results(static_cast<std::size_t>(num_local_replicas()));
    run_on_replicas([&](ReplicaContext& ctx) { results[static_cast<std::size_t>(ctx.local_replica_id())].emplace(fn(ctx)); });
    std::vector<R> out;
    out.reserve(results.size());
    for (auto& r : results) out.push_back(std::move(*r));
    return PerReplica<R>(std::move(out));
  }
  /// run() for functions that return nothing.
  void run_void(const std::function<void(ReplicaContext&)>& fn) { run_on_replicas(fn); }
  /// TF's strategy.run(fn, args=(dist_batch,)): runs fn(slice) on every replica with that
  /// replica's slice of `batch` (from a DistributedIterator). Inside, ReplicaContext's
  /// first_example() and global_batch_size() describe the slice, so model(x, {.training = true})
  /// keys dropout by global example and compute_average_loss(per_example) divides by the
  /// global batch size.
  template <typename F>
  auto run(F&& fn, const DistributedBatch& batch) -> PerReplica<std::invoke_result_t<F&, const data::Element&>> {
    LOCKSTEP_CHECK(batch.num_slices() == static_cast<std::size_t>(num_local_replicas()) &&
                       batch.offsets.size() == batch.num_slices(),
                   name(), "::run: the batch has ", batch.num_slices(), " slices, but this worker has ",
                   num_local_replicas(), " replicas (distribute the dataset with this strategy)");
    const BatchInStep in_step(*this, batch);
    batch.make_ahead_slots();
    return run([&](ReplicaContext& ctx) {
      auto result = fn(batch.begin_slice(ctx.local_replica_id()));
      batch.end_slice(ctx.local_replica_id());
      return result;
    });
  }
  /// TF's strategy.run(fn, args=(...)): fn(args...) once per local replica, each on its thread
  /// and device (get_replica_context() is the replica's); a PerReplica argument gives each
  /// replica its own component (one per local replica, checked), any other value is passed to
  /// every replica as it is. The results as run(fn)'s; nothing when fn returns nothing.
  template <typename F, typename... Args>
    requires(sizeof...(Args) >= 1 && (!std::is_same_v<std::remove_cvref_t<Args>, DistributedBatch> && ...))
  auto run(F&& fn, const Args&... args) {
    (check_replica_arg(args), ...);
    using R = std::invoke_result_t<F&, decltype(replica_arg(args, 0))...>;
    const auto call = [&](ReplicaContext& ctx) -> R {
      return fn(replica_arg(args, static_cast<std::size_t>(ctx.local_replica_id()))...);
    };
    if constexpr (std::is_void_v<R>)
      run_on_replicas(call);
    else
      return run(call);
  }
  /// How many steps (run calls) this strategy has run.
  std::uint64_t steps_run() const { return steps_run_; }

  /// Reduces per-replica tensors (same shape) across replicas, of every worker (every worker
  /// must call it alike); with `axis` (any of the values' axes, negative from the last), also
  /// along that axis of each replica's value, as TF does: kSum sums, kMean divides by the total
  /// count along it (the replicas' lengths along it may differ).
  /// The result is on the host.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& values, std::optional<int> axis = std::nullopt) const;
  /// Concatenates per-replica tensors along `axis` (negative: from the last) in replica order,
  /// of every worker (every worker must call it alike; their lengths along it may differ).
  Tensor gather(const PerReplica<Tensor>& values, int axis = 0) const;

  /// Splits each global batch of `dataset` into per-replica slices, as evenly as possible
  /// (a replica may get zero rows): views of a batch of tensors, or rows that each replica
  /// gathers on its own thread (DistributedInputOptions::row_batches). fit reads this way too.
  class DistributedIterator;
  class DistributedDataset {
   public:
    /// per_replica_batches: the dataset yields per-replica batches, N consecutive ones making
    /// a step (distribute_datasets_from_function); otherwise it yields global batches to split.
    /// first_replica, local_replicas: the slices of each global batch this worker keeps
    /// (default: all `replicas`).
    DistributedDataset(data::Dataset dataset, int replicas, bool per_replica_batches = false, int first_replica = 0,
                       int local_replicas = -1)
        : DistributedDataset(std::move(dataset), DistributedInputOptions{.replicas = replicas,
                                                                         .first_replica = first_replica,
                                                                         .local_replicas = local_replicas,
                                                                         .per_replica_batches = per_replica_batches}) {}
    DistributedDataset(data::Dataset dataset, const DistributedInputOptions& options)
        : dataset_(std::move(dataset)), options_(options) {}
    std::unique_ptr<DistributedIterator> make_iterator() const;
    const data::Dataset& dataset() const { return dataset_; }

   private:
    data::Dataset dataset_;
    DistributedInputOptions options_;
  };
  /// Under several workers each reads every global batch and keeps its replicas' slices (TF's
  /// AutoShardPolicy.DATA); distribute_datasets_from_function gives each its own pipeline.
  DistributedDataset experimental_distribute_dataset(const data::Dataset& dataset) const;
  /// tf.distribute's distribute_datasets_from_function: fn gets an InputContext (pipelines,
  /// this pipeline's id, replicas; get_per_replica_batch_size) and returns a dataset of
  /// PER-REPLICA batches; each step gives replica r the next batch in turn. Under several
  /// workers fn runs once per worker with num_input_pipelines = num_workers() and
  /// input_pipeline_id = worker_index(): shard the input there (Dataset::shard).
  DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const data::InputContext&)>& fn) const;

  /// Mirrors existing variables onto every replica's device (broadcast from replica 0).
  void mirror_variables(const std::vector<Variable>& variables);
  /// Makes every worker's copies of `tensors` (one per local replica each, e.g. a mirrored
  /// variable's copies) the chief's replica 0's: how workers start from the same weights and
  /// optimizer state. A no-op on one worker.
  void broadcast_from_chief(const std::vector<std::vector<Tensor>>& tensors);
  /// Throws DistributedError naming the first variable whose copies differ bit for bit.
  void check_mirrored(const std::vector<Variable>& variables) const;
  /// MirroredOptions::check_mirrored: Model's training steps call check_mirrored after each update.
  bool checks_mirrored_each_step() const { return check_mirrored_each_step_; }

  /// The replicas' collective group (member r is local replica r; its rank is the replica's
  /// replica_id_in_sync_group).
  CollectiveGroup& collectives() { return *group_; }
  Communicator& communicator(int replica) { return group_->member(replica); }
  /// Replica r's gradient bucketing (all_reduce_gradients), e.g. to see its bucket layout.
  const GradientReducer& gradient_reducer(int replica) const;
  /// The replicas' optimizer update: the gradient exchange and ZeRO stage 1.
  const ShardedUpdate& sharded_update() const { return *update_; }
  /// Model::gather_optimizer_slots: when a sharded update over several workers left `rule`'s
  /// slots in shards, all-gathers them on every replica (every worker must call it alike).
  void gather_sharded_slots(ElementwiseRule* rule);
  /// Drops the gradient sums that no_sync() held back (a group that will not be applied:
  /// training stopped within it), outside run().
  void drop_held_back_gradients();
  /// The gradient sums no_sync() holds back (fit's accumulation groups hold theirs there).
  GradientAccumulator& held_back_gradients();
  ComputeContext& context(int replica);
  const std::vector<ComputeContext*>& contexts() const { return context_ptrs_; }
  /// Expires when this strategy is destroyed: what a model made in its scope (or distributed to
  /// it) holds to refuse being used afterwards, by name, instead of reaching a strategy gone.
  std::weak_ptr<const void> lifetime() const { return lifetime_; }

 protected:
  explicit Strategy(StrategyLayout layout);

 private:
  std::shared_ptr<const int> lifetime_ = std::make_shared<const int>(0);
  friend class ReplicaContext;
  friend class NoSyncScope;
  void run_on_replicas(const std::function<void(ReplicaContext&)>& fn);
  template <typename A>
  void check_replica_arg(const A& arg) const {
    if constexpr (is_per_replica_v<A>)
      LOCKSTEP_CHECK(arg.size() == static_cast<std::size_t>(num_local_replicas()), name(),
                     "::run: a PerReplica argument has ", arg.size(), " values, but this worker has ",
                     num_local_replicas(), " replicas");
  }
  // Starts replicas 1..N-1's threads (replica_threads.cpp).
  void start_replica_threads();
  Tensor reduce_across_workers(ReduceOp op, const PerReplica<Tensor>& values, std::optional<int> axis) const;
  Tensor gather_across_workers(const PerReplica<Tensor>& values, int axis) const;
  struct Replicas;
  // The distributed batch of the run in progress (run(fn, batch)), for ReplicaContext.
  struct BatchInStep {
    BatchInStep(Strategy& s, const DistributedBatch& b) : s_(s) { s_.batch_in_step_ = &b; }
    ~BatchInStep() { s_.batch_in_step_ = nullptr; }
    BatchInStep(const BatchInStep&) = delete;
    BatchInStep& operator=(const BatchInStep&) = delete;
    Strategy& s_;
  };
  const DistributedBatch* batch_in_step_ = nullptr;
  std::uint64_t steps_run_ = 0;

  std::vector<Device> devices_;
  int num_workers_ = 1;
  int worker_index_ = 0;
  bool check_mirrored_each_step_ = false;
  std::vector<std::shared_ptr<ComputeContext>> contexts_;
  std::vector<ComputeContext*> context_ptrs_;
  std::unique_ptr<CollectiveGroup> group_;
  std::unique_ptr<ShardedUpdate> update_;
  std::unique_ptr<Replicas> replicas_;
};

class Strategy::DistributedIterator {
 public:
  DistributedIterator(const data::Dataset& dataset, const DistributedInputOptions& options);
  /// The next global batch split into per-replica elements (this worker's replicas'), with
  /// each slice's first row index in the global batch; nullopt at the end. Per-replica
  /// batches (distribute_datasets_from_function) come from this worker's own pipeline, and
  /// global_size then counts this worker's rows only. `read_ahead`: the batch after is read
  /// now where that needs no wait (rows, or elements for GPUs), for the replicas to prepare
  /// while this one's step runs (fit: not past an epoch's last step).
  using Batch = DistributedBatch;
  std::optional<Batch> next(bool read_ahead = true);
  /// Drops up to n batches (those trained before a resume).
  void skip(std::int64_t n);

 private:
  std::optional<Batch> next_per_replica();
  /// The next global batch, or null at the end (`ahead`: or where reading it would wait).
  std::shared_ptr<const GlobalBatch> read(bool ahead);
  DistributedInputOptions o_;
  std::unique_ptr<data::Iterator> it_;
  std::unique_ptr<data::RowBatchIterator> rows_;
  std::shared_ptr<const GlobalBatch> ahead_;  // read ahead: what next() returns
  bool ended_ = false;
};


struct MirroredOptions {
  /// Devices to mirror over, e.g. {"cpu:0", "cpu:1"} or {"gpu:0", "gpu:1"}; empty: every
  /// local device (every GPU when there is one and num_cpu_devices / $LOCKSTEP_CPU_DEVICES
  /// are not set, else every logical CPU device). "gpu:0x4" is four logical devices on gpu:0
  /// (TF's logical GPU devices; listing a device twice is an error): replicas sharing a GPU
  /// reduce through its memory, replicas on distinct GPUs through NCCL; mixing the two is an
  /// error.
  std::vector<std::string> devices;
  /// Each GPU replica's memory limit in bytes (TF's memory_limit of a logical device); 0: none.
  std::uint64_t gpu_memory_limit = 0;
  /// Logical CPU devices to create when no GPU is used; 0: $LOCKSTEP_CPU_DEVICES, else one
  /// per core. More devices than cores is allowed (a warning says they share cores).
  int num_cpu_devices = 0;
  /// How long a collective waits for a peer before reporting it.
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(5)};
  /// Pin each replica's threads to its own cores.
  bool pin_threads = true;
  /// How replicas all-reduce (tf.distribute's cross_device_ops): in-process shared memory, or
  /// the loopback transport that tests use to run everything over messages (kMpi is
  /// MultiWorkerMirroredStrategy's).
  CollectiveImplementation cross_device_ops = CollectiveImplementation::kSharedMemory;
  /// Gradient bucket size (PyTorch DDP's bucket_cap_mb; its default, 25 MiB).
  std::size_t bucket_cap_bytes = GradientReducer::kDefaultBucketCapBytes;
  /// ZeRO stage 1 on CPU replicas: the optimizer update is split over the replicas (each
  /// updates its shard of every variable right after the gradients' reduce-scatter, then the
  /// updated shards are copied into every replica's copy, or all-gathered across workers), so
  /// the memory-bound update is done once per step, not once per replica, and the optimizer's
  /// slots (Adam's moments) are held once, not per replica; across workers each worker holds
  /// only its shards of them until Model::gather_optimizer_slots() (fit runs it at every epoch's
  /// end). The weights are bit-identical either way. Used for SGD, Adam and
  /// AdamW without clipnorm / global_clipnorm and without loss scaling, on float32 variables;
  /// false makes every replica update all of its copies (for comparisons). Across workers it is
  /// sharded only where every worker's options say so (checked at start-up).
  bool shard_optimizer_update = true;
  /// Gradient buckets' collectives start during the backward pass, as soon as a bucket's
  /// gradients are final; false starts them after it (for comparisons: the same bits either
  /// way). Workers may differ.
  bool overlap_gradients = true;
  /// With the update sharded on one worker, every replica reads the others' gradients where
  /// they lie (no bucket is packed); false reduce-scatters them as across workers (for
  /// comparisons: the same bits either way). Unused across workers.
  bool gradients_in_place = true;
  /// Debug: after every training step (Model::train_step, fit) check that every replica's copy
  /// of every variable is still bit-identical; DistributedError names the first that drifted.
  /// A strategy option, not a FitOptions one: it checks the strategy's replicas, in fit and in
  /// train_step alike.
  bool check_mirrored = false;
};

class MirroredStrategy final : public Strategy {
 public:
  explicit MirroredStrategy(const MirroredOptions& options = {});
  std::string name() const override { return "MirroredStrategy"; }
};

struct MultiWorkerOptions {
  /// This worker's devices and collective settings (cross_device_ops is ignored: across
  /// workers it is MPI, in process shared memory).
  MirroredOptions local;
  /// Print the one-line notice when the process was not launched under MPI (launched under
  /// MPI by a build without it, the notice is always printed).
  bool notice = true;
};

/// tf.distribute.MultiWorkerMirroredStrategy on MPI: launched by `mpirun -np W program`, each
/// rank is a worker with its local devices, and the replicas of all workers train in sync
/// (hierarchical all-reduce: in process, then across workers). Not launched under MPI (or
/// built without it), it is a MirroredStrategy on one worker and says so in one line.
class MultiWorkerMirroredStrategy final : public Strategy {
 public:
  explicit MultiWorkerMirroredStrategy(const MultiWorkerOptions& options = {});
  std::string name() const override { return "MultiWorkerMirroredStrategy"; }
};

/// For benchmarks (`lockstep bench allreduce --workers`): seconds per raw MPI_Allreduce
/// (in-place float32 sum) of a host copy of `values` across the job's workers, the slowest
/// worker's mean over `iterations`. Every worker must call it alike; throws ValueError when
/// this process is not a worker of an MPI job.
double time_raw_mpi_all_reduce(const Tensor& values, int iterations);

/// One replica on one device (tf.distribute.OneDeviceStrategy); runs on the calling thread.
class OneDeviceStrategy final : public Strategy {
 public:
  explicit OneDeviceStrategy(const std::string& device = "cpu:0");
  std::string name() const override { return "OneDeviceStrategy"; }
};

/// sum(per_example_loss) / global_batch_size: the loss each replica should differentiate so
/// that the all-reduced (summed) gradients are those of the global batch's mean loss.
Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size);
/// TF's compute_average_loss without a global batch size: inside strategy.run(fn, batch) the
/// batch's global size (exact, even when the split is uneven); inside another replica function
/// the per-replica size times the replicas (TF's rule); outside a strategy, the batch's size.
Tensor compute_average_loss(const Tensor& per_example_loss);

/// The replica context of the replica function running on this thread (tf.distribute's
/// get_replica_context()), or null outside strategy.run.
ReplicaContext* get_replica_context();

/// The most logical CPU devices a strategy makes, however they are asked for
/// (MirroredOptions::num_cpu_devices, $LOCKSTEP_CPU_DEVICES, the CLI's --devices cpu:N): each is a
/// replica thread with its own compute context, and past this a machine runs out of threads.
inline constexpr int kMaxCpuDevices = 1024;

/// The number of logical CPU devices a default MirroredStrategy makes: $LOCKSTEP_CPU_DEVICES
/// if set, else one per available core.
int default_num_cpu_devices();

}  // namespace lockstep::distribute
