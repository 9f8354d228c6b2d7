#pragma once
// Gradient bucketing (PyTorch DDP's Reducer): a replica's gradients are packed into a few
// buffers ("buckets") and each bucket is all-reduced with one collective, started as soon as it
// is packed, so that fewer, larger collectives carry every gradient. Handed over one by one as
// the backward pass makes them final (begin / ready / finish_*), a bucket starts as soon as its
// last gradient is in, while the backward pass of the earlier layers still runs.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "lockstep/autograd/replica_interface.hpp"
#include "lockstep/autograd/variable.hpp"
#include "lockstep/distribute/communicator.hpp"

namespace lockstep::distribute {

/// How a replica's gradients are summed across the replicas: every replica receives every sum
/// (all-reduce), or only the sums of the elements it updates (reduce-scatter, a sharded update).
enum class GradientExchange { kAllReduce, kReduceScatter };

struct GradientBucket {
  DType dtype = DType::kF32;
  std::int64_t numel = 0;
  std::vector<std::size_t> variables;  // indices into the variable list, in packing order
  std::vector<std::int64_t> offsets;   // where each one's gradient starts in the bucket (elements)
};

/// DDP's bucket assignment: the variables in reverse order (the order backward produces their
/// gradients), a new bucket whenever the dtype changes or the next gradient would take the
/// bucket past `cap_bytes`; a gradient larger than the cap has a bucket of its own.
std::vector<GradientBucket> assign_gradient_buckets(const std::vector<Variable>& variables, std::size_t cap_bytes);

class GradientReducer {
 public:
  /// DDP's default bucket_cap_mb.
  static constexpr std::size_t kDefaultBucketCapBytes = std::size_t{25} << 20;

  explicit GradientReducer(std::size_t bucket_cap_bytes = kDefaultBucketCapBytes);

  /// Sums `grads` (one per variable; undefined counts as zeros) over the members of `comm`'s
  /// group, in place: grads[i] becomes a view, shaped as variables[i], into a bucket buffer.
  /// The bucket layout is computed once per variable list and reused while it is the same.
  /// Every member must call it with the same variables.
  void all_reduce(Communicator& comm, std::vector<Tensor>& grads, const std::vector<Variable>& variables);

  /// ZeRO stage 1's reduce-scatter: the same sums, but this member receives only its shard of
  /// each bucket (elements [r*k, (r+1)*k) of a bucket of numel elements, k = ceil(numel / size);
  /// the last members' shards may be short or empty), as one GradientShard per variable the
  /// shard touches. `grads` is left as it is.
  void reduce_scatter(Communicator& comm, const std::vector<Tensor>& grads, const std::vector<Variable>& variables,
                      std::vector<GradientShard>& shards);

  /// The same exchanges, fed during the backward pass. begin() starts one for `variables` (any
  /// exchange begun and not finished is dropped: its collectives' peers failed with it); ready(i,
  /// g) hands over variable i's final gradient, and starts every bucket, in bucket order, whose
  /// gradients are then all in, except the last bucket, which finish_* starts (when it is
  /// complete no backward is left to overlap); finish_* hands over the gradients not yet handed over (from
  /// `grads`, which must hold the ones already handed over), waits for every bucket and
  /// delivers the sums as all_reduce / reduce_scatter do. Each bucket is packed and summed as
  /// there, and buckets start in the same order: the same collectives, the same bits.
  void begin(Communicator& comm, const std::vector<Variable>& variables, GradientExchange kind);
  void ready(std::size_t i, const Tensor& grad);
  /// Drops an exchange begun and not finished (its replica function ended first: it threw, or
  /// never finished it); its started collectives still run, in order, whenever later ones are
  /// waited for. Nothing when none is in progress.
  void abandon() { exchange_ = Exchange{}; }
  /// Whether an exchange of `variables` of this kind was begun and not finished.
  bool in_progress(const std::vector<Variable>& variables, GradientExchange kind) const;
  void finish_all_reduce(std::vector<Tensor>& grads);
  void finish_reduce_scatter(const std::vector<Tensor>& grads, std::vector<GradientShard>& shards);
  /// Buckets whose collective the exchange in progress has started (for tests and benches).
  std::size_t buckets_started() const { return exchange_.started; }
  /// Over every exchange so far: the buckets started by ready(), before finish_* was called
  /// (during the backward pass when the tape hands the gradients over).
  std::size_t buckets_started_early() const { return started_early_; }

  /// ZeRO stage 1's all-gather, on the layout of the last call: `values` holds one tensor per
  /// variable of that call (its shape and dtype) whose elements in this member's shards are up
  /// to date. Every member's shards are gathered, and those of each member m with writes(m) are
  /// written into `values`. Every member must call it with the same layout.
  void all_gather(Communicator& comm, std::vector<Tensor>& values, const std::function<bool(int)>& writes);
  /// The elements that member `rank` of `members` updates in a sharded update of `variables`:
  /// the ranges reduce_scatter gives it, bucket by bucket. fn(variable index, first, past-last
  /// element of the flattened variable). The layout becomes the last call's.
  void for_each_owned(const std::vector<Variable>& variables, int members, int rank,
                      const std::function<void(std::size_t, std::int64_t, std::int64_t)>& fn);
  /// The variables of the last call, in its order.
  const std::vector<Variable>& variables() const { return variables_; }

  std::size_t bucket_cap_bytes() const { return cap_bytes_; }
  /// The layout of the last call.
  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  /// One gradient per variable, each undefined or of its variable's element count; `what`
  /// names the call in the error.
  static void check(const std::vector<Tensor>& grads, const std::vector<Variable>& variables, const char* what);

 private:
  /// The bucket's gradients packed into a fresh buffer of `numel` >= bucket.numel elements
  /// (undefined gradients and the tail are zeros).
  static Tensor pack(const GradientBucket& bucket, const std::vector<Tensor>& grads,
                     const std::vector<Variable>& variables, std::int64_t numel);
  static std::int64_t shard_size(const GradientBucket& bucket, int members);
  const std::vector<GradientBucket>& layout_for(const std::vector<Variable>& variables);

  /// Starts exchange_'s next buckets whose gradients are all in.
  void start_ready_buckets();
  /// Hands over what finish_* finds not handed over yet, checks the rest, waits for every bucket.
  void finish(const std::vector<Tensor>& grads, GradientExchange kind, const char* what);

  std::size_t cap_bytes_;
  std::vector<Variable> variables_;  // what buckets_ was computed for
  std::vector<std::size_t> bucket_of_;  // per variable of variables_: its bucket
  std::vector<std::int64_t> numels_;
  std::vector<DType> dtypes_;
  std::vector<GradientBucket> buckets_;

  std::size_t started_early_ = 0;
  // The exchange begun and not finished.
  struct Exchange {
    Communicator* comm = nullptr;  // null: none in progress
    GradientExchange kind = GradientExchange::kAllReduce;
    std::vector<Tensor> grads;         // per variable: what ready() handed over
    std::vector<char> handed;          // per variable: ready() called
    std::vector<std::size_t> missing;  // per bucket: gradients not handed over yet
    std::size_t started = 0;           // buckets [0, started) have their collective started
    bool finishing = false;            // in finish_*: what starts now does not start early
    std::vector<Tensor> buffers;       // per started bucket: its packed gradients (all-reduced in place)
    std::vector<Tensor> outs;          // per started bucket, reduce-scatter: this member's shard
    std::vector<WorkPtr> works;
  } exchange_;
};

}  // namespace lockstep::distribute
