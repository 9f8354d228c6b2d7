// Host-to-device copies that the host does not wait for: the staging pool over pinned memory
// (backend/staging_pool.hpp has the rule), events as its fences, and the device's pool of events
// for the fences of DeviceOps (copies beside the compute stream).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_device.hpp"

namespace lockstep::backend::cuda {

namespace {
// An event of GPU `device` (it belongs to the device current when made), without timing.
cudaEvent_t new_event(int device, const char* what) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), what);
  return e;
}

class PinnedBlocks final : public StagingPool::Ops {
 public:
  explicit PinnedBlocks(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    // Portable: the block is pinned for every GPU of the process, whichever is current.
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // pinned memory is limited (ulimit -l, a container): the slow way
      return nullptr;
    }
    return p;
  }
  void free(void* block) override {
    (void)cudaFreeHost(block);
    (void)cudaGetLastError();
  }
  void* make_fence() override { return new_event(device_, "cudaEventCreate (staging)"); }
  bool passed(void* fence) override {
    const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(fence));
    if (q == cudaErrorNotReady) return false;
    check(q, "cudaEventQuery (staging)");
    return true;
  }
  void wait(void* fence) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(fence)), "cudaEventSynchronize (staging)");
  }

 private:
  const int device_;
};

// Blocks of up to 16 MiB, 64 MiB per GPU: a copy of a few batches in flight; a larger copy goes
// in pieces, the host waiting only for the oldest piece once 64 MiB are in flight.
constexpr std::size_t kMaxBlock = std::size_t{16} << 20;
constexpr std::size_t kCapacity = std::size_t{64} << 20;
}  // namespace

std::unique_ptr<StagingPool> make_staging_pool(int device) {
  return std::make_unique<StagingPool>(std::make_unique<PinnedBlocks>(device), kMaxBlock, kCapacity);
}

void copy_host_to_device(CudaDevice& d, cudaStream_t stream, void* dst, const void* host, std::size_t bytes) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(host);
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, d.staging->max_block());
    auto lease = d.staging->acquire(n);
    if (!lease) {
      // From pageable memory CUDA waits for the stream's earlier work; then for the transfer too,
      // since the host memory may be freed or reused as soon as this returns.
      check(cudaMemcpyAsync(out, in, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (from host)");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      return;
    }
    std::memcpy(lease->host(), in, n);
    check(cudaMemcpyAsync(out, lease->host(), n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (staged)");
    check(cudaEventRecord(static_cast<cudaEvent_t>(lease->fence()), stream), "cudaEventRecord (staging)");
    out += n;
    in += n;
    bytes -= n;
  }
}

namespace {
// Staged copies (backend/staged_copy.hpp): a lease of the device's pool, held from acquire to the
// copy, whose fence the copy records.
using Lease = StagingPool::Lease;

StagedHost acquire_staged(ComputeContext& ctx, std::size_t bytes) { return lane(ctx).device->staging->lend(bytes); }

void copy_staged_beside(ComputeContext& ctx, void* dst, StagedHost block, std::size_t bytes, void* after) {
  std::unique_ptr<Lease> lease = StagingPool::reclaim(block);  // back to the pool, thrown or not
  CudaLane& l = lane(ctx);
  refuse_host_copy_in_capture(l, bytes);  // as copy_from_host_beside: the block's copy is one too
  if (after) {  // as copy_from_host_beside (cuda_context.cpp)
    check(cudaStreamWaitEvent(l.copy_stream, static_cast<cudaEvent_t>(after), 0), "cudaStreamWaitEvent (copy)");
    give_event(*l.device, static_cast<cudaEvent_t>(after));
  }
  check(cudaMemcpyAsync(dst, block.host, bytes, cudaMemcpyHostToDevice, l.copy_stream), "cudaMemcpyAsync (staged)");
  check(cudaEventRecord(static_cast<cudaEvent_t>(lease->fence()), l.copy_stream), "cudaEventRecord (staging)");
}

void release_staged(StagedHost block) { StagingPool::reclaim(block); }
}  // namespace

const StagedCopyOps& staged_copy_ops() {
  static const StagedCopyOps ops{
      .acquire = acquire_staged, .copy_beside = copy_staged_beside, .release = release_staged};
  return ops;
}

cudaEvent_t take_event(CudaDevice& d) {
  {
    std::lock_guard<std::mutex> lock(d.events_mu);
    if (!d.free_events.empty()) {
      cudaEvent_t e = d.free_events.back();
      d.free_events.pop_back();
      return e;
    }
  }
  return new_event(d.index, "cudaEventCreate (fence)");
}

void give_event(CudaDevice& d, cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(d.events_mu);
  d.free_events.push_back(e);
}

}  // namespace lockstep::backend::cuda
