#include "lockstep/distribute/gradient_reducer.hpp"

#include <algorithm>

namespace lockstep::distribute {

std::vector<GradientBucket> assign_gradient_buckets(const std::vector<Variable>& variables, std::size_t cap_bytes) {
  std::vector<GradientBucket> buckets;
  std::size_t bytes = 0;
  for (std::size_t n = variables.size(); n-- > 0;) {
    const Tensor& v = variables[n].value();
    const std::size_t b = v.nbytes();
    if (buckets.empty() || buckets.back().dtype != v.dtype() || (bytes > 0 && bytes + b > cap_bytes)) {
      buckets.push_back(GradientBucket{.dtype = v.dtype()});
      bytes = 0;
    }
    GradientBucket& bucket = buckets.back();
    bucket.variables.push_back(n);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += v.numel();
    bytes += b;
  }
  return buckets;
}

GradientReducer::GradientReducer(std::size_t bucket_cap_bytes) : cap_bytes_(bucket_cap_bytes) {
  LOCKSTEP_CHECK(bucket_cap_bytes > 0, "GradientReducer: the bucket cap must be positive");
}

const std::vector<GradientBucket>& GradientReducer::layout_for(const std::vector<Variable>& variables) {
  bool same = variables.size() == variables_.size();
  for (std::size_t i = 0; same && i < variables.size(); ++i) {
    const Tensor& v = variables[i].value();
    same = variables[i].is_same(variables_[i]) && v.numel() == numels_[i] && v.dtype() == dtypes_[i];
  }
  if (!same) {
    buckets_ = assign_gradient_buckets(variables, cap_bytes_);
    variables_ = variables;
    bucket_of_.assign(variables.size(), 0);
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (std::size_t i : buckets_[b].variables) bucket_of_[i] = b;
    numels_.clear();
    dtypes_.clear();
    for (const auto& v : variables) {
      numels_.push_back(v.value().numel());
      dtypes_.push_back(v.value().dtype());
    }
  }
  return buckets_;
}

void GradientReducer::check(const std::vector<Tensor>& grads, const std::vector<Variable>& variables,
                            const char* what) {
  LOCKSTEP_CHECK(grads.size() == variables.size(), what, ": ", grads.size(), " gradients for ", variables.size(),
                 " variables");
  for (std::size_t i = 0; i < grads.size(); ++i) {
    LOCKSTEP_CHECK(!grads[i].defined() || grads[i].numel() == variables[i].value().numel(), what, ": gradient ",
                   grads[i].shape().str(), " does not match variable '", variables[i].name(), "' ",
                   variables[i].shape().str());
  }
}

Tensor GradientReducer::pack(const GradientBucket& bucket, const std::vector<Tensor>& grads,
                             const std::vector<Variable>& variables, std::int64_t numel) {
  // Fresh buffers every step (the caching allocator makes them cheap): the gradients handed
  // out last step are views of the previous ones, and a caller may still hold them.
  Tensor buffer = Tensor::empty({numel}, bucket.dtype);
  for (std::size_t k = 0; k < bucket.variables.size(); ++k) {
    const std::size_t i = bucket.variables[k];
    const std::int64_t off = bucket.offsets[k];
    Tensor part = buffer.slice(off, off + variables[i].value().numel());
    if (!grads[i].defined()) part.fill_(0.0);
    else if (grads[i].dtype() == bucket.dtype) part.copy_from(grads[i]);
    else part.copy_from(grads[i].to(bucket.dtype));
  }
  if (numel > bucket.numel) buffer.slice(bucket.numel, numel).fill_(0.0);
  return buffer;
}

void GradientReducer::begin(Communicator& comm, const std::vector<Variable>& variables, GradientExchange kind) {
  exchange_ = Exchange{};  // an unfinished one's works failed with their peers; nobody waits for them
  const auto& layout = layout_for(variables);
  Exchange& x = exchange_;
  x.kind = kind;
  x.grads.assign(variables.size(), Tensor());
  x.handed.assign(variables.size(), 0);
  for (const GradientBucket& bucket : layout) x.missing.push_back(bucket.variables.size());
  x.buffers.reserve(layout.size());
  x.outs.reserve(layout.size());
  x.works.reserve(layout.size());
  x.comm = &comm;
}

bool GradientReducer::in_progress(const std::vector<Variable>& variables, GradientExchange kind) const {
  if (exchange_.comm == nullptr || exchange_.kind != kind || variables.size() != variables_.size()) return false;
  for (std::size_t i = 0; i < variables.size(); ++i)
    if (!variables[i].is_same(variables_[i])) return false;
  return true;
}

void GradientReducer::ready(std::size_t i, const Tensor& grad) {
  Exchange& x = exchange_;
  LOCKSTEP_CHECK(x.comm != nullptr, "GradientReducer::ready: no exchange was begun");
  LOCKSTEP_CHECK(i < x.handed.size() && !x.handed[i], "GradientReducer::ready: variable ", i,
                 i < x.handed.size() ? " was handed over twice" : " is not one of the exchange's");
  LOCKSTEP_CHECK(!grad.defined() || grad.numel() == numels_[i], "gradient exchange: gradient ", grad.shape().str(),
                 " does not match variable '", variables_[i].name(), "' ", variables_[i].shape().str());
  x.grads[i] = grad;
  x.handed[i] = 1;
  if (--x.missing[bucket_of_[i]] == 0) start_ready_buckets();
}

void GradientReducer::start_ready_buckets() {
  Exchange& x = exchange_;
  const int n = x.comm->size();
  // In bucket order, whatever order the gradients come in: every member starts the same
  // collectives in the same order.
  for (; x.started < buckets_.size() && x.missing[x.started] == 0; ++x.started) {
    // The last bucket waits for finish_*: when it is complete the backward pass is over, and
    // started before the replica's last work (its metrics), it would let a peer that waits for
    // it hand it to this member's progress thread, a thread switch on a busy core.
    if (!x.finishing && x.started + 1 == buckets_.size()) break;
    const GradientBucket& bucket = buckets_[x.started];
    if (!x.finishing) ++started_early_;
    if (x.kind == GradientExchange::kAllReduce) {
      Tensor buffer = pack(bucket, x.grads, variables_, bucket.numel);
      x.works.push_back(x.comm->all_reduce(buffer, ReduceOp::kSum));
      x.buffers.push_back(std::move(buffer));
    } else {
      // NCCL's chunking: member r gets elements [r*k, (r+1)*k) of the bucket, padded with zeros
      // to n*k. Each element is summed in member order, as all_reduce sums it: the same bits.
      const std::int64_t k = shard_size(bucket, n);
      Tensor buffer = pack(bucket, x.grads, variables_, k * n);
      Tensor out = Tensor::empty({k}, bucket.dtype);
      x.works.push_back(x.comm->reduce_scatter(buffer, out, ReduceOp::kSum));
      x.buffers.push_back(std::move(buffer));
      x.outs.push_back(std::move(out));
    }
  }
}

void GradientReducer::finish(const std::vector<Tensor>& grads, GradientExchange kind, const char* what) {
  Exchange& x = exchange_;
  LOCKSTEP_CHECK(x.comm != nullptr && x.kind == kind, what, ": no such gradient exchange was begun");
  // Ended whatever happens here: its collectives have started, so it cannot be finished again.
  struct End {
    Communicator*& comm;
    ~End() { comm = nullptr; }
  } end{x.comm};
  x.finishing = true;
  check(grads, variables_, what);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (x.handed[i]) {
      // The sums are of what was handed over; anything else here would be silently dropped.
      LOCKSTEP_CHECK(grads[i].defined() == x.grads[i].defined() &&
                         (!grads[i].defined() || grads[i].impl() == x.grads[i].impl()),
                     what, ": the gradient of variable '", variables_[i].name(),
                     "' is not the one handed over during the backward pass");
    } else {
      ready(i, grads[i]);
    }
  }
  start_ready_buckets();  // the last one, when every gradient was handed over during backward
  LOCKSTEP_CHECK(x.started == buckets_.size(), what, ": ", buckets_.size() - x.started, " gradient bucket(s) never started");
  for (auto& w : x.works) w->wait();
}

void GradientReducer::finish_all_reduce(std::vector<Tensor>& grads) {
  finish(grads, GradientExchange::kAllReduce, "all_reduce_gradients");
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    for (std::size_t k = 0; k < bucket.variables.size(); ++k) {
      const std::size_t i = bucket.variables[k];
      const std::int64_t off = bucket.offsets[k];
      grads[i] = exchange_.buffers[b].slice(off, off + numels_[i]).reshape(variables_[i].shape());
    }
  }
  exchange_ = Exchange{};
}

void GradientReducer::all_reduce(Communicator& comm, std::vector<Tensor>& grads, const std::vector<Variable>& variables) {
  if (comm.size() == 1) {
    check(grads, variables, "all_reduce_gradients");  // finish_* checks them otherwise
    return;
  }
  begin(comm, variables, GradientExchange::kAllReduce);
  finish_all_reduce(grads);
}

namespace {
// For each variable with elements in the bucket's range [lo, hi): fn(i, its first and past-last
// element there, where the first one sits in the bucket).
template <typename F>
void for_each_part(const GradientBucket& bucket, const std::vector<std::int64_t>& numels, std::int64_t lo,
                   std::int64_t hi, F&& fn) {
  for (std::size_t j = 0; j < bucket.variables.size(); ++j) {
    const std::size_t i = bucket.variables[j];
    const std::int64_t off = bucket.offsets[j];
    const std::int64_t a = std::max(lo, off), e = std::min(hi, off + numels[i]);
    if (a < e) fn(i, a - off, e - off, a);
  }
}
}  // namespace

std::int64_t GradientReducer::shard_size(const GradientBucket& bucket, int members) {
  return (bucket.numel + members - 1) / members;
}

void GradientReducer::reduce_scatter(Communicator& comm, const std::vector<Tensor>& grads,
                                     const std::vector<Variable>& variables, std::vector<GradientShard>& shards) {
  begin(comm, variables, GradientExchange::kReduceScatter);  // finish_reduce_scatter checks the gradients
  finish_reduce_scatter(grads, shards);
}

void GradientReducer::finish_reduce_scatter(const std::vector<Tensor>& grads, std::vector<GradientShard>& shards) {
  shards.clear();
  const int n = exchange_.comm ? exchange_.comm->size() : 0;
  const std::int64_t rank = exchange_.comm ? exchange_.comm->rank() : 0;
  finish(grads, GradientExchange::kReduceScatter, "the sharded update's reduce-scatter");
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    const std::int64_t k = shard_size(bucket, n);
    const std::int64_t lo = rank * k, hi = std::min(bucket.numel, lo + k);
    const Tensor& out = exchange_.outs[b];
    for_each_part(bucket, numels_, lo, hi, [&](std::size_t i, std::int64_t vb, std::int64_t ve, std::int64_t at) {
      shards.push_back(GradientShard{.variable = i, .begin = vb, .end = ve, .grads = {out.slice(at - lo, at - lo + (ve - vb))}});
    });
  }
  exchange_ = Exchange{};
}

void GradientReducer::for_each_owned(const std::vector<Variable>& variables, int members, int rank,
                                     const std::function<void(std::size_t, std::int64_t, std::int64_t)>& fn) {
  for (const GradientBucket& bucket : layout_for(variables)) {
    const std::int64_t k = shard_size(bucket, members);
    const std::int64_t lo = rank * k, hi = std::min(bucket.numel, lo + k);
    for_each_part(bucket, numels_, lo, hi,
                  [&](std::size_t i, std::int64_t vb, std::int64_t ve, std::int64_t) { fn(i, vb, ve); });
  }
}

void GradientReducer::all_gather(Communicator& comm, std::vector<Tensor>& values,
                                 const std::function<bool(int)>& writes) {
  LOCKSTEP_CHECK(values.size() == variables_.size(), "the sharded update's all-gather: ", values.size(),
                 " tensors for the ", variables_.size(), " variables of the last reduce-scatter");
  for (std::size_t i = 0; i < values.size(); ++i)
    LOCKSTEP_CHECK(values[i].defined() && values[i].numel() == numels_[i] && values[i].dtype() == dtypes_[i],
                   "the sharded update's all-gather: the tensor for variable '", variables_[i].name(),
                   "' does not match it");
  const int n = comm.size();
  const std::int64_t rank = comm.rank();
  std::vector<Tensor> flat;
  flat.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) flat.push_back(values[i].reshape({numels_[i]}));
  std::vector<Tensor> outs;
  std::vector<WorkPtr> works;
  outs.reserve(buckets_.size());
  works.reserve(buckets_.size());
  for (const GradientBucket& bucket : buckets_) {
    const std::int64_t k = shard_size(bucket, n);
    const std::int64_t lo = rank * k, hi = std::min(bucket.numel, lo + k);
    // A bucket's variables are contiguous, so only the padding past its end is not copied over.
    Tensor mine = Tensor::empty({k}, bucket.dtype);
    if (hi - lo < k) mine.slice(std::max<std::int64_t>(hi - lo, 0), k).fill_(0.0);
    for_each_part(bucket, numels_, lo, hi, [&](std::size_t i, std::int64_t vb, std::int64_t ve, std::int64_t at) {
      mine.slice(at - lo, at - lo + (ve - vb)).copy_from(flat[i].slice(vb, ve));
    });
    Tensor out = Tensor::empty({k * n}, bucket.dtype);
    works.push_back(comm.all_gather(mine, out));
    outs.push_back(std::move(out));
  }
  for (auto& w : works) w->wait();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const GradientBucket& bucket = buckets_[b];
    const std::int64_t k = shard_size(bucket, n);
    for (int m = 0; m < n; ++m) {
      if (!writes(m)) continue;
      const std::int64_t lo = m * k, hi = std::min(bucket.numel, lo + k);
      for_each_part(bucket, numels_, lo, hi, [&](std::size_t i, std::int64_t vb, std::int64_t ve, std::int64_t at) {
        flat[i].slice(vb, ve).copy_from(outs[b].slice(at, at + (ve - vb)));
      });
    }
  }
}

}  // namespace lockstep::distribute
