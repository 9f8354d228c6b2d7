#include "distribute/group_base.hpp"

#include <algorithm>
#include <sstream>

#include "lockstep/core/error.hpp"
#include "lockstep/tensor/step_capture.hpp"

namespace lockstep::distribute {

const char* collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "collective";
}

std::string CollectiveSignature::str() const {
  std::ostringstream os;
  os << collective_kind_name(kind) << "(";
  switch (kind) {
    case CollectiveKind::kAllReduce: os << in_numel << " x " << dtype_name(dtype) << ", " << reduce_op_name(op); break;
    case CollectiveKind::kReduceScatter:
      os << in_numel << " x " << dtype_name(dtype) << " -> " << out_numel << ", " << reduce_op_name(op);
      break;
    case CollectiveKind::kAllGather: os << in_numel << " x " << dtype_name(dtype) << " -> " << out_numel; break;
    case CollectiveKind::kBroadcast: os << in_numel << " x " << dtype_name(dtype) << ", root " << root; break;
    case CollectiveKind::kBarrier: break;
  }
  os << ")";
  return os.str();
}

std::string CollectiveCall::name() const { return std::string(collective_kind_name(signature.kind)) + " #" + std::to_string(seq); }

// ---------------------------------------------------------------------------------------
class GroupBase::Member final : public Communicator {
 public:
  Member(GroupBase& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return group_.first_rank() + rank_; }
  int size() const override { return group_.world_size(); }

  WorkPtr all_reduce(Tensor& t, ReduceOp op) override {
    check_defined("all_reduce", t, "tensor");
    CollectiveCall c;
    c.signature = {.kind = CollectiveKind::kAllReduce, .dtype = t.dtype(), .op = op, .in_numel = t.numel()};
    c.in = c.out = flat(t);
    return group_.start(rank_, std::move(c));
  }

  WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_defined("reduce_scatter", in, "input");
    check_defined("reduce_scatter", out, "output");
    LOCKSTEP_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * size(), "reduce_scatter on member ",
                   rank_, ": the input must have size() = ", size(), " times the output's elements, of its dtype; got ",
                   in.shape().str(), " ", dtype_name(in.dtype()), " -> ", out.shape().str(), " ", dtype_name(out.dtype()));
    CollectiveCall c;
    c.signature = {.kind = CollectiveKind::kReduceScatter,
                   .dtype = in.dtype(),
                   .op = op,
                   .in_numel = in.numel(),
                   .out_numel = out.numel()};
    c.in = flat(in);
    c.out = flat(out);
    return group_.start(rank_, std::move(c));
  }

  WorkPtr all_gather(const Tensor& in, Tensor& out) override {
    check_defined("all_gather", in, "input");
    check_defined("all_gather", out, "output");
    LOCKSTEP_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size(), "all_gather on member ", rank_,
                   ": the output must have size() = ", size(), " times the input's elements, of its dtype; got ",
                   in.shape().str(), " ", dtype_name(in.dtype()), " -> ", out.shape().str(), " ", dtype_name(out.dtype()));
    CollectiveCall c;
    c.signature = {.kind = CollectiveKind::kAllGather, .dtype = in.dtype(), .in_numel = in.numel(), .out_numel = out.numel()};
    c.in = flat(in);
    c.out = flat(out);
    return group_.start(rank_, std::move(c));
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    check_defined("broadcast", t, "tensor");
    LOCKSTEP_CHECK(root >= 0 && root < size(), "broadcast on member ", rank_, ": root ", root, " is not a member of a group of ",
                   size());
    CollectiveCall c;
    c.signature = {.kind = CollectiveKind::kBroadcast, .dtype = t.dtype(), .root = root, .in_numel = t.numel()};
    c.in = c.out = flat(t);
    return group_.start(rank_, std::move(c));
  }

  WorkPtr barrier() override { return group_.start(rank_, CollectiveCall{}); }

  void abort(const std::string& reason) override {
    group_.fail("member " + std::to_string(rank_) + " aborted the group: " + reason);
  }

 private:
  void check_defined(const char* op, const Tensor& t, const char* what) const {
    LOCKSTEP_CHECK(t.defined(), op, " on member ", rank_, ": the ", what, " is an undefined tensor");
  }
  static Tensor flat(const Tensor& t) { return t.rank() == 1 ? t : t.reshape(Shape{t.numel()}); }

  GroupBase& group_;
  const int rank_;
};

// ---------------------------------------------------------------------------------------
GroupBase::GroupBase(CollectiveImplementation implementation, int size, const CollectiveOptions& options, int world_size,
                     int first_rank)
    : implementation_(implementation),
      size_(size),
      world_size_(world_size > 0 ? world_size : size),
      first_rank_(first_rank),
      timeout_(options.timeout) {
  LOCKSTEP_CHECK(size >= 1, "a collective group needs at least one member, got ", size);
  LOCKSTEP_CHECK(first_rank >= 0 && first_rank + size <= world_size_, "members [", first_rank, ", ", first_rank + size,
                 ") are not in a group of ", world_size_);
  LOCKSTEP_CHECK(options.timeout.count() > 0, "CollectiveOptions::timeout must be positive, got ",
                 options.timeout.count(), " ms");
  started_ = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    members_.push_back(std::make_unique<Member>(*this, r));
    queues_.push_back(std::make_unique<WorkQueue>(timeout_));
    started_[static_cast<std::size_t>(r)].store(0);
  }
}

GroupBase::~GroupBase() = default;

void GroupBase::shutdown() {
  bool pending = false;
  for (auto& q : queues_) pending = pending || !q->wait_idle(Clock::now());
  if (pending) fail("the group was destroyed with collectives pending");
  queues_.clear();  // each runs (fails) what it still holds, then joins its progress thread
}

Communicator& GroupBase::member(int rank) {
  LOCKSTEP_CHECK(rank >= 0 && rank < size_, "member ", rank, " is not in a group of ", size_);
  return *members_[static_cast<std::size_t>(rank)];
}

WorkPtr GroupBase::start(int rank, CollectiveCall call) {
  const auto r = static_cast<std::size_t>(rank);
  // Only the member's own thread starts its collectives; peers read the count (members_behind).
  call.seq = started_[r].load(std::memory_order_relaxed) + 1;
  started_[r].store(call.seq, std::memory_order_release);
  // Nothing to wait for, or it fails at once; or the starter queues into a graph capture, which
  // records (and takes memory for) the work of the threads that queue it: its own.
  const bool now = world_size_ == 1 || failed() || StepGraph::capturing_here();
  const bool eager = !now && prepare(rank, call);
  auto work = std::make_shared<QueuedWork>(*this, now ? nullptr : queues_[r].get(), rank, std::move(call),
                                           current_compute_context(), timeout_);
  if (now) {
    work->execute(Deadline::in(timeout_));
  } else {
    queues_[r]->push(work);
    if (eager) queues_[r]->hurry();
  }
  return work;
}

void GroupBase::execute(int rank, const CollectiveCall& call, const Deadline& deadline) {
  check_failed(rank, call);
  if (world_size_ == 1) return run_single(call);
  try {
    run(rank, call, deadline);
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    fail("member " + std::to_string(rank) + " failed in " + call.name() + ": " + e.what());
    throw;
  } catch (...) {
    fail("member " + std::to_string(rank) + " failed in " + call.name());
    throw;
  }
}

void GroupBase::run_single(const CollectiveCall& call) {
  // One member: every reduction of one value is that value (a mean of one is itself).
  const CollectiveKind k = call.signature.kind;
  if (k == CollectiveKind::kReduceScatter || k == CollectiveKind::kAllGather) {
    Tensor out = call.out;
    out.copy_from(call.in);
  }
}

void GroupBase::fail(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    failure_ = what;
    failed_.store(true, std::memory_order_release);
  }
  wake_transport();
  for (auto& q : queues_) q->hurry();  // what is queued runs (and fails) now
}

std::string GroupBase::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

void GroupBase::throw_failed(int rank, const CollectiveCall& call) const {
  throw DistributedError(call.name() + " on member " + std::to_string(rank) + " failed: " + failure());
}

void GroupBase::fail_timeout(int rank, const CollectiveCall& call, std::chrono::milliseconds timeout,
                             const std::vector<int>& missing) {
  const std::string what = timeout_message(rank, call, timeout, missing);
  fail(what);
  throw DistributedError(what);
}

std::string GroupBase::timeout_message(int rank, const CollectiveCall& call, std::chrono::milliseconds timeout,
                                       const std::vector<int>& missing) const {
  std::ostringstream os;
  os << call.name() << " timed out after " << timeout.count() << " ms on member " << rank;
  if (missing.empty()) {
    os << ": " << stall_detail();
  } else {
    os << ": member(s)";
    for (int m : missing) os << " " << m;
    os << " never arrived";
  }
  return os.str();
}

void GroupBase::hurry_peers(int rank) {
  for (std::size_t r = 0; r < queues_.size(); ++r)
    if (static_cast<int>(r) != rank) queues_[r]->hurry();
}

std::vector<int> GroupBase::members_behind(std::uint64_t seq) const {
  std::vector<int> behind;
  for (int r = 0; r < size_; ++r)
    if (started_[static_cast<std::size_t>(r)].load(std::memory_order_acquire) < seq) behind.push_back(r);
  return behind;
}

void GroupBase::reset() {
  if (!failed()) return;
  const auto deadline = Clock::now() + timeout_;
  for (int r = 0; r < size_; ++r) {
    LOCKSTEP_CHECK_T(DistributedError, queues_[static_cast<std::size_t>(r)]->wait_idle(deadline),
                     "collective group reset: member ", r, " still runs a collective after ", timeout_.count(), " ms");
  }
  reset_transport();
  // Members may have started different numbers of collectives before the failure.
  std::uint64_t latest = 0;
  for (int r = 0; r < size_; ++r) latest = std::max(latest, started_[static_cast<std::size_t>(r)].load());
  for (int r = 0; r < size_; ++r) started_[static_cast<std::size_t>(r)].store(latest);
  std::lock_guard<std::mutex> lock(failure_mu_);
  failure_.clear();
  failed_.store(false, std::memory_order_release);
}

}  // namespace lockstep::distribute
