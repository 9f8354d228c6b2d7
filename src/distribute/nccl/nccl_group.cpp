// CollectiveImplementation::kNccl: one member per local GPU, communicators from
// ncclCommInitAll, each member's NCCL calls on a communication stream of its own (llm.c's and
// PyTorch DDP's arrangement). A collective's ordering is three events, no host wait:
//  - prepare(), on the starting thread: `ready` on the compute stream, after the work that wrote
//    the inputs (a gradient bucket the backward pass just finished);
//  - run(), on the member's progress thread (NCCL collectives start at once): the members first
//    agree on the collective through the shared-memory group's signature exchange (a mismatch is
//    the same DistributedError as elsewhere, and nobody enqueues an NCCL call its peers will
//    never make); then the communication stream waits for `ready`, the NCCL call, `done` there;
//  - the Work's wait(): the compute stream waits for `done` (the optimizer reads the result
//    after it), while the backward kernels queued in between ran beside the collective.
// The host waits only where it reads a value (the stream's synchronisation). The deadline is the
// watchdog's (collective_watchdog.hpp): a collective not done by it, an NCCL or CUDA error, or a
// group failed elsewhere aborts the member's communicator (ncclCommAbort ends its kernels) and
// fails the group naming the collective; reset() makes new communicators if any was aborted. A
// collective's tensors are held until the watchdog saw `done` pass, so their blocks go back to
// the compute stream's allocator only when NCCL is through with them.
// Built as the plugin liblockstep_nccl.so (nccl_plugin/nccl_loader.cpp loads it).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/context.hpp"
#include "backend/devices.hpp"
#include "distribute/collective_watchdog.hpp"
#include "distribute/nccl_group.hpp"
#include "distribute/shared_memory_group.hpp"

namespace lockstep::distribute {

namespace {
void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) throw DistributedError(what + ": " + ncclGetErrorString(r));
}
void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw DistributedError(what + ": " + cudaGetErrorString(e));
  }
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMean: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

cudaStream_t compute_stream(backend::ComputeContext& ctx) {  // also makes its GPU current
  return static_cast<cudaStream_t>(backend::device_kind(ctx.device().kind).stream(ctx));
}

// One collective's two events; it holds the collective's tensors until it is destroyed, which
// is once the Work let it go and the watchdog saw `done` pass.
class NcclCompletion final : public DeviceCompletion {
 public:
  NcclCompletion(const CollectiveCall& call, cudaStream_t compute, const std::string& what)
      : in_(call.in), out_(call.out) {
    try {
      check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), what);
      check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), what);
      check_cuda(cudaEventRecord(ready_, compute), what);
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCompletion() override { release(); }
  void join(ComputeContext& context) override {
    if (!recorded_) return;  // never enqueued: run() failed, and so did the Work
    check_cuda(cudaStreamWaitEvent(compute_stream(context), done_, 0), "waiting for an NCCL collective");
  }

  cudaEvent_t ready() const { return ready_; }
  cudaEvent_t done() const { return done_; }
  /// `done` was recorded after the NCCL call (run(), before its Work completes).
  void set_recorded() { recorded_ = true; }

 private:
  void release() {
    // A pending event may be destroyed: its resources go when it passes.
    if (ready_) (void)cudaEventDestroy(ready_);
    if (done_) (void)cudaEventDestroy(done_);
    (void)cudaGetLastError();
  }

  Tensor in_, out_;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool recorded_ = false;
};

class NcclGroup final : public SharedMemoryGroup {
 public:
  NcclGroup(int size, const CollectiveOptions& options)
      : SharedMemoryGroup(CollectiveImplementation::kNccl, size, options, size, 0),
        devices_(options.devices),
        comm_mu_(std::make_unique<std::mutex[]>(static_cast<std::size_t>(size))) {
    for (const Device& d : devices_) gpus_.push_back(d.index);
    comms_.assign(static_cast<std::size_t>(size), nullptr);
    streams_.assign(static_cast<std::size_t>(size), nullptr);
    aborted_.assign(static_cast<std::size_t>(size), 0);
    init_comms();
    for (int r = 0; r < size; ++r) {
      // Highest priority, as c10d's: a collective's kernels go first when the backward pass's
      // kernels fill the GPU.
      int least = 0, greatest = 0;
      check_cuda(cudaSetDevice(gpus_[static_cast<std::size_t>(r)]), "cudaSetDevice");
      check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
      check_cuda(cudaStreamCreateWithPriority(&streams_[static_cast<std::size_t>(r)], cudaStreamNonBlocking, greatest),
                 "cudaStreamCreate (NCCL)");
    }
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        CollectiveWatchdog::Hooks{.failed = [this] { return failed(); },
                                  .fail = [this](const std::string& what) { fail_unless_destroyed(what); },
                                  .abort = [this](int member) { abort_comm(member); }},
        std::chrono::milliseconds(1));
  }

  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(teardown_mu_);
      tearing_down_ = true;
    }
    shutdown();
    // What is still on the devices ends first: the communicators and streams are its.
    if (!watchdog_->wait_idle(Clock::now() + timeout())) {
      fail("the group was destroyed with NCCL collectives still running");
      (void)watchdog_->wait_idle(Clock::now() + timeout());
    }
    watchdog_.reset();
    destroy_comms();
    for (std::size_t r = 0; r < streams_.size(); ++r) {
      if (!streams_[r]) continue;
      (void)cudaSetDevice(gpus_[r]);
      (void)cudaStreamDestroy(streams_[r]);
    }
    (void)cudaGetLastError();
  }

 protected:
  bool prepare(int rank, CollectiveCall& call) override {
    if (call.signature.kind == CollectiveKind::kBarrier) return false;  // the host's alone
    backend::ComputeContext& ctx = backend::current_context();
    if (!(ctx.device() == devices_[static_cast<std::size_t>(rank)])) return false;  // run() names it
    try {
      call.device = std::make_shared<NcclCompletion>(call, compute_stream(ctx), "starting " + call.name() + " over NCCL");
    } catch (const std::exception&) {
      return false;  // run() records it, and meets the error again
    }
    return true;
  }

  void run(int rank, const CollectiveCall& call, const Deadline& deadline) override {
    agree(rank, call, deadline, false);
    const CollectiveSignature& sig = call.signature;
    if (sig.kind == CollectiveKind::kBarrier) return;
    const auto r = static_cast<std::size_t>(rank);
    backend::ComputeContext& ctx = backend::current_context();
    LOCKSTEP_CHECK(ctx.device() == devices_[r], call.name(), " over NCCL: member ", rank, " runs on ", ctx.device().str(),
                   " but its communicator is on ", devices_[r].str());
    const std::string what = call.name() + " over NCCL on member " + std::to_string(rank);
    cudaStream_t compute = compute_stream(ctx);
    // prepare() made it, unless it could not: then the inputs are ready where the stream is now,
    // and the result is joined at once.
    auto completion = std::static_pointer_cast<NcclCompletion>(call.device);
    const bool join_now = !completion;
    try {
      if (join_now) completion = std::make_shared<NcclCompletion>(call, compute, what);
      enqueue(rank, call, *completion, what);
    } catch (const DistributedError& e) {
      // Its peers' parts are on their devices and would wait for this one forever.
      fail(e.what());
      throw;
    }
    completion->set_recorded();
    watchdog_->watch(rank, std::make_shared<Watched>(*this, rank, completion), deadline.at, what,
                     timeout_message(rank, call, deadline.after, {}));
    if (join_now) completion->join(ctx);
  }

  void reset_transport() override {
    SharedMemoryGroup::reset_transport();
    // The group failed, so the watchdog aborted every member with collectives still running: they end now.
    LOCKSTEP_CHECK_T(DistributedError, watchdog_->wait_idle(Clock::now() + timeout()),
                     "collective group reset: NCCL collectives still run on the GPUs after ", timeout().count(), " ms");
    bool any = false;
    {
      const auto lock = lock_all();
      for (char a : aborted_) any |= a != 0;
    }
    if (!any) return;
    destroy_comms();
    init_comms();
  }

 private:
  // What the watchdog polls: the collective's `done`, and its communicator's asynchronous error.
  class Watched final : public WatchedCompletion {
   public:
    Watched(NcclGroup& group, int rank, std::shared_ptr<NcclCompletion> completion)
        : group_(group), rank_(rank), completion_(std::move(completion)) {}
    State query(std::string* error) override { return group_.query(rank_, completion_->done(), error); }

   private:
    NcclGroup& group_;  // the watchdog, and so this, goes before the group
    const int rank_;
    std::shared_ptr<NcclCompletion> completion_;
  };

  // On the member's communication stream, after `ready`; `done` after it. Under the member's
  // lock, so that the watchdog does not abort the communicator in the middle.
  void enqueue(int rank, const CollectiveCall& call, const NcclCompletion& completion, const std::string& what) {
    const auto r = static_cast<std::size_t>(rank);
    const CollectiveSignature& sig = call.signature;
    const ncclDataType_t type = nccl_type(sig.dtype);
    Tensor out = call.out;
    void* out_ptr = out.raw_data();
    const void* in_ptr = call.in.raw_data();
    std::lock_guard<std::mutex> lock(comm_mu_[r]);
    ncclComm_t comm = comms_[r];
    if (!comm) throw_failed(rank, call);  // aborted: the group failed
    cudaStream_t stream = streams_[r];
    check_cuda(cudaStreamWaitEvent(stream, completion.ready(), 0), what);
    switch (sig.kind) {
      case CollectiveKind::kAllReduce:
        check_nccl(ncclAllReduce(in_ptr, out_ptr, static_cast<std::size_t>(sig.in_numel), type, nccl_op(sig.op), comm,
                                 stream),
                   what);
        break;
      case CollectiveKind::kReduceScatter:
        check_nccl(ncclReduceScatter(in_ptr, out_ptr, static_cast<std::size_t>(sig.out_numel), type, nccl_op(sig.op),
                                     comm, stream),
                   what);
        break;
      case CollectiveKind::kAllGather:
        check_nccl(ncclAllGather(in_ptr, out_ptr, static_cast<std::size_t>(sig.in_numel), type, comm, stream), what);
        break;
      case CollectiveKind::kBroadcast:
        check_nccl(ncclBroadcast(in_ptr, out_ptr, static_cast<std::size_t>(sig.in_numel), type, sig.root, comm, stream),
                   what);
        break;
      case CollectiveKind::kBarrier: break;
    }
    check_cuda(cudaEventRecord(completion.done(), stream), what);
  }

  WatchedCompletion::State query(int rank, cudaEvent_t done, std::string* error) {
    const auto r = static_cast<std::size_t>(rank);
    (void)cudaSetDevice(gpus_[r]);
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) return WatchedCompletion::State::kDone;
    if (q != cudaErrorNotReady) {
      (void)cudaGetLastError();
      *error = cudaGetErrorString(q);
      return WatchedCompletion::State::kFailed;
    }
    // Not while the member enqueues (its lock): the next poll asks again.
    std::unique_lock<std::mutex> lock(comm_mu_[r], std::try_to_lock);
    ncclResult_t async = ncclSuccess;
    if (lock.owns_lock() && comms_[r]) (void)ncclCommGetAsyncError(comms_[r], &async);
    if (async == ncclSuccess || async == ncclInProgress) return WatchedCompletion::State::kPending;
    *error = ncclGetErrorString(async);
    return WatchedCompletion::State::kFailed;
  }

  // GroupBase::fail wakes the members' queues, which shutdown() destroys: not from the watchdog
  // then (the destructor fails the group itself if collectives are left).
  void fail_unless_destroyed(const std::string& what) {
    std::lock_guard<std::mutex> lock(teardown_mu_);
    if (!tearing_down_) fail(what);
  }

  void abort_comm(int rank) {
    const auto r = static_cast<std::size_t>(rank);
    std::lock_guard<std::mutex> lock(comm_mu_[r]);
    if (aborted_[r] || !comms_[r]) return;
    (void)ncclCommAbort(comms_[r]);
    comms_[r] = nullptr;
    aborted_[r] = 1;
  }

  // Both with no collective running (construction, reset, destruction), yet under every
  // member's lock: the watchdog's queries read the communicators.
  void init_comms() {
    const auto lock = lock_all();
    check_nccl(ncclCommInitAll(comms_.data(), size(), gpus_.data()),
               "ncclCommInitAll over " + std::to_string(size()) + " GPUs");
    aborted_.assign(aborted_.size(), 0);
  }

  void destroy_comms() {
    const auto lock = lock_all();
    for (std::size_t r = 0; r < comms_.size(); ++r) {
      if (comms_[r]) (void)(aborted_[r] ? ncclCommAbort(comms_[r]) : ncclCommDestroy(comms_[r]));
      comms_[r] = nullptr;
    }
  }

  std::vector<std::unique_lock<std::mutex>> lock_all() {
    std::vector<std::unique_lock<std::mutex>> locks;
    for (int r = 0; r < size(); ++r) locks.emplace_back(comm_mu_[static_cast<std::size_t>(r)]);
    return locks;
  }

  std::vector<Device> devices_;
  std::vector<int> gpus_;
  std::unique_ptr<std::mutex[]> comm_mu_;  // [member]: its communicator and aborted_ entry
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;      // [member]: its communication stream
  std::vector<char> aborted_;
  std::mutex teardown_mu_;
  bool tearing_down_ = false;  // guarded by teardown_mu_
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};
}  // namespace

}  // namespace lockstep::distribute

// The plugin's entry point (nccl_loader.cpp checked the arguments).
extern "C" __attribute__((visibility("default"))) lockstep::distribute::CollectiveGroup* lockstep_nccl_group(
    int size, const lockstep::distribute::CollectiveOptions& options) {
  return new lockstep::distribute::NcclGroup(size, options);
}
