#include "distribute/shared_memory_group.hpp"

#include <sstream>
#include <thread>

#include "backend/kernels.hpp"
#include "backend/thread_pool.hpp"
#include "distribute/cpu_pause.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

SharedMemoryGroup::SharedMemoryGroup(int size, const CollectiveOptions& options)
    : SharedMemoryGroup(CollectiveImplementation::kSharedMemory, size, options, size, 0) {}

SharedMemoryGroup::SharedMemoryGroup(CollectiveImplementation implementation, int size, const CollectiveOptions& options,
                                     int world_size, int first_rank)
    : GroupBase(implementation, size, options, world_size, first_rank),
      member_generation_(std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(size))) {
  for (int p = 0; p < 2; ++p) {
    signatures_[p].resize(static_cast<std::size_t>(size));
    inputs_[p].resize(static_cast<std::size_t>(size));
  }
  for (int r = 0; r < size; ++r) member_generation_[static_cast<std::size_t>(r)].store(0);
  const std::vector<Device>& devices = options.devices;
  peers_.resize(static_cast<std::size_t>(size));
  for (int r = 0; r < size && devices.size() == static_cast<std::size_t>(size); ++r)
    for (int j = 0; j < size; ++j)
      if (j != r && devices[r] == devices[j] && devices[r].kind != DeviceKind::kCpu) peers_[r].push_back(j);
  for (auto& slot : fences_) slot.assign(static_cast<std::size_t>(size) * static_cast<std::size_t>(size), nullptr);
}

SharedMemoryGroup::~SharedMemoryGroup() { shutdown(); }

void SharedMemoryGroup::wake_transport() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void SharedMemoryGroup::reset_transport() {
  std::lock_guard<std::mutex> lock(mu_);
  arrived_.store(0);
  const std::uint64_t gen = generation_.fetch_add(1) + 1;
  for (int r = 0; r < size(); ++r) member_generation_[static_cast<std::size_t>(r)].store(gen);
  for (auto& slots : inputs_)
    for (auto& t : slots) t = Tensor();
  // Fences of a barrier that failed: never waited for (their events are not reused).
  for (auto& slot : fences_) slot.assign(slot.size(), nullptr);
}

void SharedMemoryGroup::arrive_and_wait(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const auto& peers = peers_[static_cast<std::size_t>(rank)];
  backend::ComputeContext* ctx = peers.empty() ? nullptr : &backend::current_context();
  const backend::DeviceOps* ops = ctx ? &backend::device_ops(ctx->device().kind) : nullptr;
  if (!ops || !ops->record_fence) return arrive_and_wait_host(rank, call, deadline);
  const std::size_t n = static_cast<std::size_t>(size()), r = static_cast<std::size_t>(rank);
  // Recorded before this member arrives, waited for by each peer after the barrier opens; the
  // slot of this generation is free (its previous fences were waited for before their waiters
  // arrived at the barrier in between).
  auto& mine = fences_[generation_.load() & 1];
  for (int j : peers) mine[r * n + static_cast<std::size_t>(j)] = ops->record_fence(*ctx, false);
  arrive_and_wait_host(rank, call, deadline);
  for (int j : peers) {
    void*& f = mine[static_cast<std::size_t>(j) * n + r];
    ops->wait_fence(*ctx, f);
    f = nullptr;
  }
}

void SharedMemoryGroup::arrive_and_wait_host(int rank, const CollectiveCall& call, const Deadline& deadline) {
  check_failed(rank, call);
  const std::uint64_t gen = generation_.load();
  member_generation_[static_cast<std::size_t>(rank)].store(gen + 1);
  if (arrived_.fetch_add(1) + 1 == size()) {
    arrived_.store(0);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    return;
  }
  for (int i = 0; i < 2000; ++i) {
    if (generation_.load() != gen) return;
    if (failed()) throw_failed(rank, call);
    // A replica's own thread copies a chunk of its next batch meanwhile (a few microseconds).
    if (backend::help_idle_work()) {
      i = 0;
      continue;
    }
    if (i < 200) cpu_pause();
    else std::this_thread::yield();
    if (i == 200) hurry_peers(rank);  // a late peer may have left its part to its progress thread
  }
  std::unique_lock<std::mutex> lock(mu_);
  sleepers_.fetch_add(1);
  cv_.wait_until(lock, deadline.at, [&] { return generation_.load() != gen || failed(); });
  sleepers_.fetch_sub(1);
  if (generation_.load() != gen) return;
  lock.unlock();
  if (failed()) throw_failed(rank, call);
  std::vector<int> missing;
  for (int r = 0; r < size(); ++r)
    if (member_generation_[static_cast<std::size_t>(r)].load() <= gen) missing.push_back(r);
  fail_timeout(rank, call, deadline.after, missing);
}

void SharedMemoryGroup::throw_mismatch(int rank, const CollectiveCall& call, int parity, const Deadline& deadline) {
  const auto& sigs = signatures_[parity];
  std::size_t j = 1;
  while (sigs[j] == sigs[0]) ++j;
  std::ostringstream os;
  os << call.name() << ": members disagree: member 0 called " << sigs[0].str() << ", member " << j << " called "
     << sigs[j].str();
  // Nobody may publish its next collective over these signatures before everyone read them.
  arrive_and_wait(rank, call, deadline);
  inputs_[parity][static_cast<std::size_t>(rank)] = Tensor();
  throw DistributedError(os.str());
}

void SharedMemoryGroup::agree(int rank, const CollectiveCall& call, const Deadline& deadline, bool publish_input) {
  const int p = static_cast<int>(call.seq & 1);
  const auto r = static_cast<std::size_t>(rank);
  signatures_[p][r] = call.signature;
  if (publish_input) inputs_[p][r] = call.in;
  arrive_and_wait(rank, call, deadline);  // every member's tensors are published and final
  for (int j = 1; j < size(); ++j)
    if (!(signatures_[p][static_cast<std::size_t>(j)] == signatures_[p][0])) throw_mismatch(rank, call, p, deadline);
}

void SharedMemoryGroup::run(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const int p = static_cast<int>(call.seq & 1);
  const auto r = static_cast<std::size_t>(rank);
  const CollectiveSignature& sig = call.signature;
  agree(rank, call, deadline, true);
  if (sig.kind == CollectiveKind::kBarrier) return;

  const std::vector<Tensor>& ins = inputs_[p];
  switch (sig.kind) {
    case CollectiveKind::kAllReduce: {
      // This member combines its chunk of every member's tensor, in member order, and writes
      // the result into that chunk of every tensor: one read and N writes per element.
      std::int64_t b = 0, e = 0;
      chunk_range(sig.in_numel, dtype_size(sig.dtype), size(), rank, &b, &e);
      reduce_across(sig.op, ins, ins, b, e);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      const std::int64_t k = sig.out_numel;
      std::vector<Tensor> chunks;
      chunks.reserve(ins.size());
      for (const Tensor& t : ins) chunks.push_back(t.slice(rank * k, (rank + 1) * k));
      reduce_across(sig.op, chunks, {call.out}, 0, k);
      break;
    }
    case CollectiveKind::kAllGather: {
      const std::int64_t k = sig.in_numel;
      for (int j = 0; j < size(); ++j) call.out.slice(j * k, (j + 1) * k).copy_from(ins[static_cast<std::size_t>(j)]);
      break;
    }
    case CollectiveKind::kBroadcast:
      if (rank != sig.root) {
        Tensor t = call.out;
        t.copy_from(ins[static_cast<std::size_t>(sig.root)]);
      }
      break;
    case CollectiveKind::kBarrier: break;
  }
  // Every member's part is written; nobody may use or change its tensors before that.
  arrive_and_wait(rank, call, deadline);
  inputs_[p][r] = Tensor();
}

}  // namespace lockstep::distribute
