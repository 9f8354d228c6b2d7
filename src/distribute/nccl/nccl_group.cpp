// CollectiveImplementation::kNccl: one member per local GPU, communicators from
// ncclCommInitAll. The members first agree on the collective through the shared-memory
// group's signature exchange (so a mismatch is the same DistributedError as elsewhere, and
// nobody enqueues an NCCL call its peers will never make); then each member enqueues its NCCL
// call on its context's stream and waits for the device with a deadline: past it, or when the
// group fails, the member aborts its communicator (ncclCommAbort ends its kernels) and the
// group fails naming the collective. reset() makes new communicators if any was aborted.
// Built as the plugin liblockstep_nccl.so (nccl_plugin/nccl_loader.cpp loads it).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/context.hpp"
#include "backend/devices.hpp"
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

class NcclGroup final : public SharedMemoryGroup {
 public:
  NcclGroup(int size, const CollectiveOptions& options)
      : SharedMemoryGroup(CollectiveImplementation::kNccl, size, options, size, 0), devices_(options.devices) {
    for (const Device& d : devices_) gpus_.push_back(d.index);
    comms_.assign(static_cast<std::size_t>(size), nullptr);
    events_.assign(static_cast<std::size_t>(size), nullptr);
    aborted_.assign(static_cast<std::size_t>(size), 0);
    init_comms();
    for (int r = 0; r < size; ++r) {
      check_cuda(cudaSetDevice(gpus_[static_cast<std::size_t>(r)]), "cudaSetDevice");
      check_cuda(cudaEventCreateWithFlags(&events_[static_cast<std::size_t>(r)], cudaEventDisableTiming),
                 "cudaEventCreate");
    }
  }

  ~NcclGroup() override {
    shutdown();
    destroy_comms();
    for (std::size_t r = 0; r < events_.size(); ++r) {
      if (!events_[r]) continue;
      (void)cudaSetDevice(gpus_[r]);
      (void)cudaEventDestroy(events_[r]);
    }
    (void)cudaGetLastError();
  }

 protected:
  void run(int rank, const CollectiveCall& call, const Deadline& deadline) override {
    agree(rank, call, deadline, false);
    const CollectiveSignature& sig = call.signature;
    if (sig.kind == CollectiveKind::kBarrier) return;
    const auto r = static_cast<std::size_t>(rank);
    ncclComm_t comm = comms_[r];
    backend::ComputeContext& ctx = backend::current_context();
    LOCKSTEP_CHECK(ctx.device() == devices_[r], call.name(), " over NCCL: member ", rank, " runs on ", ctx.device().str(),
                   " but its communicator is on ", devices_[r].str());
    auto stream = static_cast<cudaStream_t>(backend::device_kind(ctx.device().kind).stream(ctx));  // also makes its GPU current
    const ncclDataType_t type = nccl_type(sig.dtype);
    const std::string what = call.name() + " over NCCL on member " + std::to_string(rank);
    Tensor out = call.out;
    void* out_ptr = out.raw_data();
    const void* in_ptr = call.in.raw_data();
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
    check_cuda(cudaEventRecord(events_[r], stream), what);
    wait_device(rank, call, deadline, what);
  }

  void reset_transport() override {
    SharedMemoryGroup::reset_transport();
    bool any = false;
    for (char a : aborted_) any |= a != 0;
    if (!any) return;
    destroy_comms();
    init_comms();
  }

 private:
  // Polls the member's event: the device finished the collective, NCCL reported an error, the
  // group failed elsewhere, or the deadline passed (the last three abort the communicator).
  void wait_device(int rank, const CollectiveCall& call, const Deadline& deadline, const std::string& what) {
    const auto r = static_cast<std::size_t>(rank);
    for (int spin = 0;; ++spin) {
      const cudaError_t q = cudaEventQuery(events_[r]);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort_comm(rank);
        fail(what + ": " + cudaGetErrorString(q));
        throw_failed(rank, call);
      }
      ncclResult_t async = ncclSuccess;
      (void)ncclCommGetAsyncError(comms_[r], &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_comm(rank);
        fail(what + ": " + ncclGetErrorString(async));
        throw_failed(rank, call);
      }
      if (failed()) {
        abort_comm(rank);
        throw_failed(rank, call);
      }
      if (Clock::now() >= deadline.at) {
        abort_comm(rank);
        fail_timeout(rank, call, deadline.after, {});
      }
      if (spin < 1000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void abort_comm(int rank) {
    const auto r = static_cast<std::size_t>(rank);
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (aborted_[r] || !comms_[r]) return;
    (void)ncclCommAbort(comms_[r]);
    comms_[r] = nullptr;
    aborted_[r] = 1;
  }

  void init_comms() {
    std::lock_guard<std::mutex> lock(comm_mu_);
    check_nccl(ncclCommInitAll(comms_.data(), size(), gpus_.data()),
               "ncclCommInitAll over " + std::to_string(size()) + " GPUs");
    aborted_.assign(aborted_.size(), 0);
  }

  void destroy_comms() {
    std::lock_guard<std::mutex> lock(comm_mu_);
    for (std::size_t r = 0; r < comms_.size(); ++r) {
      if (comms_[r]) (void)(aborted_[r] ? ncclCommAbort(comms_[r]) : ncclCommDestroy(comms_[r]));
      comms_[r] = nullptr;
    }
  }

  std::vector<Device> devices_;
  std::vector<int> gpus_;
  std::mutex comm_mu_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaEvent_t> events_;
  std::vector<char> aborted_;
};
}  // namespace

}  // namespace lockstep::distribute

// The plugin's entry point (nccl_loader.cpp checked the arguments).
extern "C" __attribute__((visibility("default"))) lockstep::distribute::CollectiveGroup* lockstep_nccl_group(
    int size, const lockstep::distribute::CollectiveOptions& options) {
  return new lockstep::distribute::NcclGroup(size, options);
}
