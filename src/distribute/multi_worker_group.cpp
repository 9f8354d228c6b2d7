#include "distribute/multi_worker_group.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <sstream>

#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

namespace {
using Range = std::pair<std::int64_t, std::int64_t>;

int next_tag() {
  // Groups are made in the same order on every worker, so the n-th group has the same tag
  // everywhere. MPI guarantees tags up to 32767.
  static std::atomic<int> groups{0};
  return 1 + groups.fetch_add(1) % 32000;
}

using Transfer = WorkerTransport::Transfer;
using Bytes = WorkerTransport::Bytes;

// Elements [begin, end) of `t` as a message to or from `peer`. A host tensor's own memory
// travels (no staging copy: the cross-worker step is memory-bound, and each copy cost as much
// as the transfer); `keep` then holds the tensor's storage, so memory MPI may still touch
// after a failed exchange stays allocated. A device tensor is staged through host bytes:
// `finish` copies a staged receive into the tensor.
struct Window {
  Transfer transfer;
  Tensor target;  // set: a staged receive, copied into target at byte `offset` by finish()
  std::size_t offset = 0;

  static Window of(int peer, const Tensor& t, std::int64_t begin, std::int64_t end, bool receive) {
    const std::size_t es = dtype_size(t.dtype());
    const std::size_t offset = static_cast<std::size_t>(begin) * es, size = static_cast<std::size_t>(end - begin) * es;
    Window w;
    if (t.device().kind == DeviceKind::kCpu) {
      auto keep = std::make_shared<Tensor>(t);
      // Host bytes of a CPU tensor: what this transport exists to move (check_layering allows it here).
      auto* base = static_cast<std::byte*>(keep->raw_data());
      w.transfer = Transfer{peer, base + offset, size, std::move(keep)};
      return w;
    }
    auto bytes = std::make_shared<Bytes>(size);
    if (!receive && size) t.copy_to_host(bytes->data(), size, offset);
    w.transfer = Transfer::of(peer, std::move(bytes));
    if (receive) {
      w.target = t;
      w.offset = offset;
    }
    return w;
  }
  void finish() {
    if (target.defined() && transfer.size) target.copy_from_host(transfer.data, transfer.size, offset);
  }
};

std::vector<Transfer> transfers(const std::vector<Window>& windows) {
  std::vector<Transfer> out;
  out.reserve(windows.size());
  for (const Window& w : windows) out.push_back(w.transfer);
  return out;
}

// Elements [begin, end) of t become their sum divided by `count`, in t's dtype.
void divide(const Tensor& t, std::int64_t begin, std::int64_t end, int count) {
  if (begin == end) return;
  Tensor part = t.slice(begin, end);
  const Tensor f = part.dtype() == DType::kF32 ? part : part.to(DType::kF32);
  const Tensor q = scale(f, 1.0f / static_cast<float>(count));
  part.copy_from(q.dtype() == part.dtype() ? q : q.to(part.dtype()));
}

struct Header {
  std::uint64_t seq = 0;
  CollectiveSignature signature;
};
}  // namespace

MultiWorkerGroup::MultiWorkerGroup(WorkerTransport& transport, int local_size, const CollectiveOptions& options)
    : SharedMemoryGroup(CollectiveImplementation::kMpi, local_size, options, local_size * transport.size(),
                        transport.rank() * local_size),
      transport_(transport),
      worker_(transport.rank()),
      workers_(transport.size()),
      tag_(next_tag()) {
  for (auto& slots : outputs_) slots.resize(static_cast<std::size_t>(local_size));
  if (workers_ == 1) return;
  // Every worker must have as many local members: ranks are worker * local_size + member.
  std::vector<Transfer> sends, receives;
  auto mine = std::make_shared<Bytes>(sizeof(std::int32_t));
  const auto local = static_cast<std::int32_t>(local_size);
  std::memcpy(mine->data(), &local, sizeof local);
  for (int j = 0; j < workers_; ++j) {
    if (j == worker_) continue;
    sends.push_back(Transfer::of(j, mine));
    receives.push_back(Transfer::of(j, std::make_shared<Bytes>(sizeof(std::int32_t))));
  }
  const Deadline deadline = Deadline::in(timeout());
  transport_.exchange(tag_, sends, receives, deadline.at, deadline.after, "the group's set-up");
  for (const Transfer& t : receives) {
    std::int32_t n = 0;
    std::memcpy(&n, t.data, sizeof n);
    LOCKSTEP_CHECK(n == local_size, "multi-worker collectives: worker ", t.peer, " has ", n, " local replica(s), worker ",
                   worker_, " has ", local_size, "; every worker needs the same number (the same --devices)");
  }
}

MultiWorkerGroup::~MultiWorkerGroup() { shutdown(); }

std::string MultiWorkerGroup::stall_detail() const {
  const std::string w = transport_.waiting_for();
  return w.empty() ? SharedMemoryGroup::stall_detail() : "it still waits for " + w;
}

void MultiWorkerGroup::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                                const CollectiveCall& call, const Deadline& deadline) {
  if (sends.empty() && receives.empty()) return;
  transport_.exchange(tag_, sends, receives, deadline.at, deadline.after,
                      call.name() + " (" + call.signature.str() + ")");
}

void MultiWorkerGroup::check_signatures(const CollectiveCall& call, const Deadline& deadline) {
  // Every worker sends its header to every other, so all see all and agree on the verdict;
  // receiving them is also the cross-worker barrier.
  using Wire = std::array<std::byte, sizeof(Header)>;
  const Wire wire = std::bit_cast<Wire>(Header{call.seq, call.signature});
  std::vector<Transfer> sends, receives;
  const auto mine = std::make_shared<Bytes>(wire.begin(), wire.end());
  for (int j = 0; j < workers_; ++j) {
    if (j == worker_) continue;
    sends.push_back(Transfer::of(j, mine));
    receives.push_back(Transfer::of(j, std::make_shared<Bytes>(wire.size())));
  }
  exchange(sends, receives, call, deadline);
  std::vector<Header> headers(static_cast<std::size_t>(workers_));
  headers[static_cast<std::size_t>(worker_)] = Header{call.seq, call.signature};
  for (const Transfer& t : receives) {
    Wire w;
    std::memcpy(w.data(), t.data, w.size());
    headers[static_cast<std::size_t>(t.peer)] = std::bit_cast<Header>(w);
  }
  for (std::size_t j = 1; j < headers.size(); ++j) {
    if (headers[j].seq == headers[0].seq && headers[j].signature == headers[0].signature) continue;
    std::ostringstream os;
    os << call.name() << ": workers disagree: worker 0 called " << headers[0].signature.str() << " as its collective #"
       << headers[0].seq << ", worker " << j << " called " << headers[j].signature.str() << " as its #"
       << headers[j].seq;
    throw DistributedError(os.str());
  }
}

void MultiWorkerGroup::reduce_ranges(Tensor& t, ReduceOp op, const std::vector<Range>& ranges, const CollectiveCall& call,
                                     const Deadline& deadline) {
  const auto [b, e] = ranges[static_cast<std::size_t>(worker_)];
  // Worker j's chunk goes to j straight from `t`; the others' parts of ours arrive in
  // scratch tensors (from the context's caching allocator: no allocation in steady state).
  std::vector<Window> sends, receives;
  std::vector<Tensor> chunks(static_cast<std::size_t>(workers_));
  chunks[static_cast<std::size_t>(worker_)] = t.slice(b, e);
  for (int j = 0; j < workers_; ++j) {
    if (j == worker_) continue;
    const auto [jb, je] = ranges[static_cast<std::size_t>(j)];
    sends.push_back(Window::of(j, t, jb, je, false));
    Tensor& theirs = chunks[static_cast<std::size_t>(j)];
    theirs = Tensor::empty({e - b}, t.dtype());
    receives.push_back(Window::of(j, theirs, 0, e - b, true));
  }
  exchange(transfers(sends), transfers(receives), call, deadline);
  if (b == e) return;
  for (Window& w : receives) w.finish();
  reduce_across(op, chunks, {chunks[static_cast<std::size_t>(worker_)]}, 0, e - b);
}

void MultiWorkerGroup::gather_ranges(Tensor& t, const std::vector<Range>& ranges, const CollectiveCall& call,
                                     const Deadline& deadline) {
  const auto [b, e] = ranges[static_cast<std::size_t>(worker_)];
  std::vector<Window> sends, receives;
  const Window mine = Window::of(worker_, t, b, e, false);
  for (int j = 0; j < workers_; ++j) {
    if (j == worker_) continue;
    const auto [jb, je] = ranges[static_cast<std::size_t>(j)];
    Window to = mine;
    to.transfer.peer = j;
    sends.push_back(to);
    receives.push_back(Window::of(j, t, jb, je, true));
  }
  exchange(transfers(sends), transfers(receives), call, deadline);
  for (Window& w : receives) w.finish();
}

void MultiWorkerGroup::cross_workers(const CollectiveCall& call, const Deadline& deadline, const Tensor& buffer_in,
                                     int broadcast_source) {
  const CollectiveSignature& sig = call.signature;
  const int local = size();
  // With one local member the cross-worker fold is the whole fold: the op itself (kMean
  // included) gives what one process of W members gives. Otherwise local sums are summed.
  const ReduceOp op = sig.op == ReduceOp::kMean && local > 1 ? ReduceOp::kSum : sig.op;
  const bool divide_after = sig.op == ReduceOp::kMean && local > 1;
  Tensor buffer = buffer_in;
  if (workers_ > 1) check_signatures(call, deadline);
  std::vector<Range> ranges(static_cast<std::size_t>(workers_));
  const auto mine = [&] { return ranges[static_cast<std::size_t>(worker_)]; };
  switch (sig.kind) {
    case CollectiveKind::kAllReduce: {
      for (int j = 0; j < workers_; ++j) {
        auto& [b, e] = ranges[static_cast<std::size_t>(j)];
        chunk_range(sig.in_numel, dtype_size(sig.dtype), workers_, j, &b, &e);
      }
      reduce_ranges(buffer, op, ranges, call, deadline);
      if (divide_after) divide(buffer, mine().first, mine().second, world_size());
      gather_ranges(buffer, ranges, call, deadline);
      break;
    }
    case CollectiveKind::kReduceScatter: {
      const std::int64_t block = sig.out_numel * local;
      for (int j = 0; j < workers_; ++j) ranges[static_cast<std::size_t>(j)] = {j * block, (j + 1) * block};
      reduce_ranges(buffer, op, ranges, call, deadline);
      if (divide_after) divide(buffer, mine().first, mine().second, world_size());
      break;
    }
    case CollectiveKind::kAllGather: {
      const std::int64_t block = sig.in_numel * local;
      for (int j = 0; j < workers_; ++j) ranges[static_cast<std::size_t>(j)] = {j * block, (j + 1) * block};
      gather_ranges(buffer, ranges, call, deadline);
      break;
    }
    case CollectiveKind::kBroadcast: {
      const int root_worker = sig.root / local;
      std::vector<Window> sends, receives;
      (void)broadcast_source;
      if (worker_ == root_worker) {
        for (int j = 0; j < workers_; ++j)
          if (j != worker_) sends.push_back(Window::of(j, buffer, 0, sig.in_numel, false));
      } else {
        receives.push_back(Window::of(root_worker, buffer, 0, sig.in_numel, true));
      }
      exchange(transfers(sends), transfers(receives), call, deadline);
      for (Window& w : receives) w.finish();
      break;
    }
    case CollectiveKind::kBarrier: break;  // the signature exchange was the barrier
  }
}

void MultiWorkerGroup::run(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const int p = static_cast<int>(call.seq & 1);
  const auto r = static_cast<std::size_t>(rank);
  const CollectiveSignature& sig = call.signature;
  const int local = size();
  signatures_[p][r] = sig;
  inputs_[p][r] = call.in;
  outputs_[p][r] = call.out;
  if (rank == 0) {
    // Nobody reads these before the next barrier, and everyone finished reading the previous
    // collective's before its last one.
    cross_error_.clear();
    scratch_ = sig.kind == CollectiveKind::kReduceScatter ? Tensor::empty({sig.in_numel}, sig.dtype) : Tensor();
  }
  arrive_and_wait(rank, call, deadline);  // every local member's tensors are published and final
  for (int j = 1; j < local; ++j)
    if (!(signatures_[p][static_cast<std::size_t>(j)] == signatures_[p][0])) throw_mismatch(rank, call, p, deadline);
  const std::vector<Tensor>& ins = inputs_[p];
  const std::vector<Tensor>& outs = outputs_[p];
  const ReduceOp local_op = sig.op == ReduceOp::kMean ? ReduceOp::kSum : sig.op;
  const std::int64_t global_rank = first_rank() + rank;

  // 1. In process: the local members' contributions meet in one buffer of member 0's.
  Tensor buffer;
  int source = 0;  // broadcast: the local member whose tensor holds the data
  switch (sig.kind) {
    case CollectiveKind::kAllReduce: {
      if (local > 1) {
        std::int64_t b = 0, e = 0;
        chunk_range(sig.in_numel, dtype_size(sig.dtype), local, rank, &b, &e);
        reduce_across(local_op, ins, {ins[0]}, b, e);
        arrive_and_wait(rank, call, deadline);
      }
      buffer = ins[0];
      break;
    }
    case CollectiveKind::kReduceScatter: {
      std::int64_t b = 0, e = 0;
      chunk_range(sig.in_numel, dtype_size(sig.dtype), local, rank, &b, &e);
      reduce_across(local_op, ins, {scratch_}, b, e);
      arrive_and_wait(rank, call, deadline);
      buffer = scratch_;
      break;
    }
    case CollectiveKind::kAllGather: {
      const std::int64_t k = sig.in_numel;
      outs[0].slice(global_rank * k, (global_rank + 1) * k).copy_from(call.in);
      arrive_and_wait(rank, call, deadline);
      buffer = outs[0];
      break;
    }
    case CollectiveKind::kBroadcast:
      source = sig.root / local == worker_ ? sig.root % local : 0;
      buffer = ins[static_cast<std::size_t>(source)];
      break;
    case CollectiveKind::kBarrier: break;
  }

  // 2. Across workers, by local member 0.
  if (rank == 0) {
    try {
      cross_workers(call, deadline, buffer, source);
    } catch (const DistributedError& e) {
      cross_error_ = e.what();
      // A transport failure leaves the workers out of step for good: fail the group, which
      // releases the local members. A disagreement is raised alike by everyone below.
      if (!transport_.failure().empty()) {
        fail(cross_error_);
        throw;
      }
    }
  }
  arrive_and_wait(rank, call, deadline);
  if (!cross_error_.empty()) {
    const std::string what = cross_error_;
    arrive_and_wait(rank, call, deadline);  // nobody starts the next collective before all read it
    inputs_[p][r] = Tensor();
    outputs_[p][r] = Tensor();
    throw DistributedError(what);
  }

  // 3. In process: every local member takes its part of the result.
  Tensor out = call.out;
  switch (sig.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllGather:
      if (rank != 0) out.copy_from(buffer);
      break;
    case CollectiveKind::kReduceScatter: {
      const std::int64_t k = sig.out_numel;
      out.copy_from(buffer.slice(global_rank * k, (global_rank + 1) * k));
      break;
    }
    case CollectiveKind::kBroadcast:
      if (rank != source) out.copy_from(buffer);
      break;
    case CollectiveKind::kBarrier: break;
  }
  arrive_and_wait(rank, call, deadline);  // nobody may use or change its tensors before all copied
  inputs_[p][r] = Tensor();
  outputs_[p][r] = Tensor();
}

}  // namespace lockstep::distribute
