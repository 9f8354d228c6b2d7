#include "distribute/multi_worker_group.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "core/env.hpp"
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
  const Tensor f = part.to(DType::kF32);
  const Tensor q = scale(f, 1.0f / static_cast<float>(count));
  part.copy_from(q.dtype() == part.dtype() ? q : q.to(part.dtype()));
}

using Header = HostSegment::Header;

// "all_reduce #12 (all_reduce(1000 x float32, sum))": how errors and stall reports name a call.
std::string describe(const CollectiveCall& call) { return call.name() + " (" + call.signature.str() + ")"; }

// What a worker says of itself when a group is made.
struct WorkerInfo {
  std::int32_t local_size = 0;
  std::int32_t pid = 0;
  std::uint64_t machine = 0;     // this_machine()
  std::uint64_t slot_bytes = 0;  // its LOCKSTEP_WORKER_SHM_SLOT_MIB; 0: not a valid setting
  std::int32_t shared_memory = 1;  // 0: LOCKSTEP_WORKER_SHM=0
  std::int32_t unused = 0;
};

// The same on every process of one machine (one boot of one host), and different on another:
// FNV-1a of the host name and the kernel's boot id.
std::uint64_t this_machine() {
  std::string id(256, '\0');
  if (gethostname(id.data(), id.size() - 1) != 0) id.clear();
  id.resize(std::strlen(id.c_str()));
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {};
    if (std::fgets(boot, sizeof boot, f)) id += std::string("/") + boot;
    std::fclose(f);
  }
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <typename T>
Bytes to_bytes(const T& value) {
  const auto wire = std::bit_cast<std::array<std::byte, sizeof(T)>>(value);
  return Bytes(wire.begin(), wire.end());
}

template <typename T>
T from_bytes(const Bytes& bytes) {
  std::array<std::byte, sizeof(T)> wire;
  LOCKSTEP_CHECK(bytes.size() == wire.size(), "multi-worker collectives: a message of ", bytes.size(),
                 " bytes where ", wire.size(), " were expected");
  std::memcpy(wire.data(), bytes.data(), wire.size());
  return std::bit_cast<T>(wire);
}
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
  // Whether they meet in shared memory is decided alike everywhere from what all of them say:
  // every worker on this machine, none with LOCKSTEP_WORKER_SHM=0, worker 0's slot size.
  WorkerInfo me{static_cast<std::int32_t>(local_size), static_cast<std::int32_t>(getpid()), this_machine()};
  std::string bad_setting;
  try {
    me.slot_bytes = slot_bytes();
    me.shared_memory = env::flag("LOCKSTEP_WORKER_SHM") ? 1 : 0;
  } catch (const ValueError& e) {
    bad_setting = e.what();
  }
  const Deadline deadline = Deadline::in(timeout());
  const std::vector<Bytes> all = transport_.all_to_all(tag_, to_bytes(me), deadline.at, deadline.after,
                                                       "the group's set-up");
  if (!bad_setting.empty()) throw ValueError(bad_setting);
  bool one_machine = true, wanted = true;
  std::vector<std::int32_t> pids;
  std::uint64_t chief_slot_bytes = 0;
  for (int j = 0; j < workers_; ++j) {
    const WorkerInfo info = from_bytes<WorkerInfo>(all[static_cast<std::size_t>(j)]);
    LOCKSTEP_CHECK(info.local_size == local_size, "multi-worker collectives: worker ", j, " has ", info.local_size,
                   " local replica(s), worker ", worker_, " has ", local_size,
                   "; every worker needs the same number (the same --devices)");
    if (info.slot_bytes == 0)
      throw ValueError("multi-worker collectives: worker " + std::to_string(j) +
                       " has an invalid LOCKSTEP_WORKER_SHM_SLOT_MIB (it says which)");
    one_machine = one_machine && info.machine == me.machine;
    wanted = wanted && info.shared_memory != 0;
    pids.push_back(info.pid);
    if (j == 0) chief_slot_bytes = info.slot_bytes;
  }
  if (!one_machine) {
    host_note_ = "the workers run on several machines";
  } else if (!wanted) {
    host_note_ = "LOCKSTEP_WORKER_SHM=0";
  } else {
    std::string why;
    host_ = HostSegment::open(transport_, tag_, chief_slot_bytes, pids, deadline, &why);
    if (!host_) {
      host_note_ = "shared memory is unavailable (" + why + ")";
      static std::once_flag said;
      std::call_once(said, [&] {
        std::fprintf(stderr, "lockstep: the workers on this machine use MPI's messages: %s\n", host_note_.c_str());
      });
    }
  }
}

MultiWorkerGroup::~MultiWorkerGroup() { shutdown(); }

std::size_t MultiWorkerGroup::slot_bytes() {
  return static_cast<std::size_t>(*env::integer("LOCKSTEP_WORKER_SHM_SLOT_MIB")) << 20;
}

std::string MultiWorkerGroup::stall_detail() const {
  std::string w = host_ ? host_->waiting_for() : std::string();
  if (w.empty()) w = transport_.waiting_for();
  return w.empty() ? SharedMemoryGroup::stall_detail() : "it still waits for " + w;
}

void MultiWorkerGroup::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                                const CollectiveCall& call, const Deadline& deadline) {
  if (sends.empty() && receives.empty()) return;
  transport_.exchange(tag_, sends, receives, deadline.at, deadline.after,
                      describe(call));
}

void MultiWorkerGroup::check_signatures(const CollectiveCall& call, const Deadline& deadline) {
  // Every worker sends its header to every other, so all see all and agree on the verdict;
  // receiving them is also the cross-worker barrier.
  const std::vector<Bytes> all = transport_.all_to_all(tag_, to_bytes(Header{call.seq, call.signature}), deadline.at,
                                                       deadline.after, describe(call));
  std::vector<Header> headers;
  for (const Bytes& b : all) headers.push_back(from_bytes<Header>(b));
  check_headers(call, headers);
}

void MultiWorkerGroup::check_headers(const CollectiveCall& call, const std::vector<Header>& headers) {
  for (std::size_t j = 1; j < headers.size(); ++j) {
    if (headers[j].seq == headers[0].seq && headers[j].signature == headers[0].signature) continue;
    std::ostringstream os;
    os << call.name() << ": workers disagree: worker 0 called " << headers[0].signature.str() << " as its collective #"
       << headers[0].seq << ", worker " << j << " called " << headers[j].signature.str() << " as its #"
       << headers[j].seq;
    throw DistributedError(os.str());
  }
}

bool MultiWorkerGroup::cross_workers_on_host(const CollectiveCall& call, const Deadline& deadline, Tensor& buffer,
                                             ReduceOp op, bool divide_after) {
  const CollectiveSignature& sig = call.signature;
  const int local = size();
  const int set = host_->next_set();
  // What this worker publishes: elements [pb, pe) of the buffer, at the same place in its slot,
  // but for all_reduce and reduce_scatter its own chunk, which only it reads.
  std::int64_t pb = 0, pe = 0;
  std::int64_t own_b = 0, own_e = 0;
  switch (sig.kind) {
    case CollectiveKind::kAllReduce:
      pe = sig.in_numel;
      chunk_range(pe, dtype_size(sig.dtype), workers_, worker_, &own_b, &own_e);
      break;
    case CollectiveKind::kReduceScatter:
      pe = sig.in_numel;
      own_b = worker_ * sig.out_numel * local;
      own_e = own_b + sig.out_numel * local;
      break;
    case CollectiveKind::kAllGather: {
      const std::int64_t block = sig.in_numel * local;
      pb = worker_ * block;
      pe = pb + block;
      break;
    }
    case CollectiveKind::kBroadcast:
      if (sig.root / local == worker_) pe = sig.in_numel;
      break;
    case CollectiveKind::kBarrier: break;
  }
  const std::size_t es = dtype_size(sig.dtype);
  // Every worker that agrees on the signature decides alike.
  const std::int64_t n = sig.kind == CollectiveKind::kAllGather ? sig.in_numel * local : sig.in_numel;
  const bool fits = static_cast<std::size_t>(n) * es <= host_->slot_bytes() &&
                    (!buffer.defined() || buffer.device().kind == DeviceKind::kCpu);
  host_->header(set, worker_) = Header{call.seq, sig};
  if (fits && pe > pb) {
    const Tensor mine = host_->slot(set, worker_, pe - pb, sig.dtype);
    const auto publish = [&](std::int64_t b, std::int64_t e) {
      if (e > b) mine.slice(b - pb, e - pb).copy_from(buffer.slice(b, e));
    };
    publish(pb, std::max(pb, own_b));
    publish(std::max(pb, own_e), pe);
  }
  const auto barrier = [&] {
    try {
      host_->arrive_and_wait(deadline, [&] { return describe(call); });
    } catch (const DistributedError& e) {
      transport_.abandon(e.what());  // the workers are out of step for good: fail the group and the job
      throw;
    }
  };
  barrier();
  std::vector<Header> headers;
  for (int j = 0; j < workers_; ++j) headers.push_back(host_->header(set, j));
  check_headers(call, headers);
  if (!fits) return false;

  const auto slot = [&](int j, std::int64_t numel) { return host_->slot(set, j, numel, sig.dtype); };
  std::vector<Tensor> slots;
  switch (sig.kind) {
    case CollectiveKind::kAllReduce: {
      // Worker j folds chunk j of everyone's (its own from its buffer) into its buffer and its
      // slot; after the second barrier every worker copies the others' chunks out of theirs.
      for (int j = 0; j < workers_; ++j) slots.push_back(j == worker_ ? buffer : slot(j, n));
      const Tensor mine = slot(worker_, n);
      reduce_across(op, slots, {buffer, mine}, own_b, own_e);
      if (divide_after) {
        divide(buffer, own_b, own_e, world_size());
        if (own_e > own_b) mine.slice(own_b, own_e).copy_from(buffer.slice(own_b, own_e));
      }
      barrier();
      for (int j = 0; j < workers_; ++j) {
        std::int64_t b = 0, e = 0;
        chunk_range(n, es, workers_, j, &b, &e);
        if (j != worker_ && e > b) buffer.slice(b, e).copy_from(slots[static_cast<std::size_t>(j)].slice(b, e));
      }
      break;
    }
    case CollectiveKind::kReduceScatter: {
      // This worker's block of the buffer is the fold of everyone's.
      for (int j = 0; j < workers_; ++j) slots.push_back(j == worker_ ? buffer : slot(j, n));
      reduce_across(op, slots, {buffer}, own_b, own_e);
      if (divide_after) divide(buffer, own_b, own_e, world_size());
      break;
    }
    case CollectiveKind::kAllGather: {
      const std::int64_t block = pe - pb;
      for (int j = 0; j < workers_; ++j)
        if (j != worker_ && block) buffer.slice(j * block, (j + 1) * block).copy_from(slot(j, block));
      break;
    }
    case CollectiveKind::kBroadcast: {
      const int root_worker = sig.root / local;
      if (root_worker != worker_ && n) buffer.copy_from(slot(root_worker, n));
      break;
    }
    case CollectiveKind::kBarrier: break;  // the barrier was the collective
  }
  return true;
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
  if (workers_ > 1 && host_) {
    if (cross_workers_on_host(call, deadline, buffer, op, divide_after)) return;
  } else if (workers_ > 1) {
    check_signatures(call, deadline);
  }
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
