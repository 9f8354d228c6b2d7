#include "distribute/loopback_group.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <sstream>

#include "lockstep/tensor/ops.hpp"

namespace lockstep::distribute {

LoopbackGroup::LoopbackGroup(int size, const CollectiveOptions& options)
    : GroupBase(CollectiveImplementation::kLoopback, size, options) {
  for (int r = 0; r < size; ++r) {
    inboxes_.push_back(std::make_unique<Inbox>());
    inboxes_.back()->from.resize(static_cast<std::size_t>(size));
  }
}

LoopbackGroup::~LoopbackGroup() { shutdown(); }

void LoopbackGroup::wake_transport() {
  for (auto& in : inboxes_) {
    std::lock_guard<std::mutex> lock(in->mu);
    in->cv.notify_all();
  }
}

void LoopbackGroup::reset_transport() {
  for (auto& in : inboxes_) {
    std::lock_guard<std::mutex> lock(in->mu);
    for (auto& box : in->from) box.clear();
  }
}

void LoopbackGroup::send(int from, int to, std::uint64_t seq, Bytes bytes) {
  Inbox& in = *inboxes_[static_cast<std::size_t>(to)];
  {
    std::lock_guard<std::mutex> lock(in.mu);
    in.from[static_cast<std::size_t>(from)].push_back(Message{seq, std::move(bytes)});
  }
  in.cv.notify_all();
}

std::vector<LoopbackGroup::Bytes> LoopbackGroup::receive(int rank, const std::vector<int>& senders,
                                                         const CollectiveCall& call, const Deadline& deadline) {
  Inbox& in = *inboxes_[static_cast<std::size_t>(rank)];
  std::unique_lock<std::mutex> lock(in.mu);
  auto all_there = [&] {
    for (int s : senders)
      if (in.from[static_cast<std::size_t>(s)].empty()) return false;
    return true;
  };
  if (!all_there() && !failed()) {
    // A sender may have started its part and gone on without waiting: it must progress now.
    lock.unlock();
    hurry_peers(rank);
    lock.lock();
  }
  in.cv.wait_until(lock, deadline.at, [&] { return all_there() || failed(); });
  if (!all_there()) {
    lock.unlock();
    if (failed()) throw_failed(rank, call);
    std::vector<int> missing;
    {
      std::lock_guard<std::mutex> relock(in.mu);
      for (int s : senders)
        if (in.from[static_cast<std::size_t>(s)].empty()) missing.push_back(s);
    }
    fail_timeout(rank, call, deadline.after, missing);
  }
  std::vector<Bytes> out(static_cast<std::size_t>(size()));
  for (int s : senders) {
    auto& box = in.from[static_cast<std::size_t>(s)];
    // Mailboxes are first in first out and members run their collectives in order, so the
    // next message from s belongs to this collective.
    LOCKSTEP_ASSERT(box.front().seq == call.seq);
    out[static_cast<std::size_t>(s)] = std::move(box.front().bytes);
    box.pop_front();
  }
  return out;
}

LoopbackGroup::Bytes LoopbackGroup::pack(const Tensor& t, std::int64_t begin, std::int64_t end) {
  const std::size_t es = dtype_size(t.dtype());
  Bytes b(static_cast<std::size_t>(end - begin) * es);
  t.copy_to_host(b.data(), b.size(), static_cast<std::size_t>(begin) * es);
  return b;
}

Tensor LoopbackGroup::unpack(const Bytes& bytes, DType dtype) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(bytes.size() / dtype_size(dtype))}, dtype);
  t.copy_from_host(bytes.data(), bytes.size());
  return t;
}

std::vector<int> LoopbackGroup::peers(int rank) const {
  std::vector<int> p;
  for (int j = 0; j < size(); ++j)
    if (j != rank) p.push_back(j);
  return p;
}

void LoopbackGroup::exchange_signatures(int rank, const CollectiveCall& call, const Deadline& deadline) {
  // Everyone sends its signature to everyone, so every member sees every member's arguments
  // and raises the same error; receiving them all is also the barrier.
  using Wire = std::array<std::byte, sizeof(CollectiveSignature)>;
  const auto wire = std::bit_cast<Wire>(call.signature);
  const Bytes mine(wire.begin(), wire.end());
  for (int j : peers(rank)) send(rank, j, call.seq, mine);
  std::vector<Bytes> got = receive(rank, peers(rank), call, deadline);
  got[static_cast<std::size_t>(rank)] = mine;
  std::vector<CollectiveSignature> sigs;
  for (const Bytes& b : got) {
    Wire w;
    LOCKSTEP_ASSERT(b.size() == w.size());
    std::copy(b.begin(), b.end(), w.begin());
    sigs.push_back(std::bit_cast<CollectiveSignature>(w));
  }
  for (std::size_t j = 1; j < sigs.size(); ++j) {
    if (!(sigs[j] == sigs[0])) {
      std::ostringstream os;
      os << call.name() << ": members disagree: member 0 called " << sigs[0].str() << ", member " << j << " called "
         << sigs[j].str();
      throw DistributedError(os.str());
    }
  }
}

void LoopbackGroup::run(int rank, const CollectiveCall& call, const Deadline& deadline) {
  exchange_signatures(rank, call, deadline);
  switch (call.signature.kind) {
    case CollectiveKind::kAllReduce: return all_reduce(rank, call, deadline);
    case CollectiveKind::kReduceScatter: return reduce_scatter(rank, call, deadline);
    case CollectiveKind::kAllGather: return all_gather(rank, call, deadline);
    case CollectiveKind::kBroadcast: return broadcast(rank, call, deadline);
    case CollectiveKind::kBarrier: return;
  }
}

void LoopbackGroup::all_reduce(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const CollectiveSignature& sig = call.signature;
  const std::size_t es = dtype_size(sig.dtype);
  std::vector<std::int64_t> begin(static_cast<std::size_t>(size())), end(begin.size());
  for (int j = 0; j < size(); ++j) {
    const auto u = static_cast<std::size_t>(j);
    chunk_range(sig.in_numel, es, size(), j, &begin[u], &end[u]);
  }
  const auto r = static_cast<std::size_t>(rank);
  // Reduce-scatter: member j gets everyone's chunk j and combines them in member order.
  for (int j : peers(rank)) {
    const auto u = static_cast<std::size_t>(j);
    send(rank, j, call.seq, pack(call.in, begin[u], end[u]));
  }
  std::vector<Bytes> got = receive(rank, peers(rank), call, deadline);
  Tensor mine = call.in.slice(begin[r], end[r]);
  std::vector<Tensor> chunks;
  for (int j = 0; j < size(); ++j) chunks.push_back(j == rank ? mine : unpack(got[static_cast<std::size_t>(j)], sig.dtype));
  reduce_across(sig.op, chunks, {mine}, 0, mine.numel());
  // All-gather: everyone gets every member's combined chunk.
  const Bytes reduced = pack(mine, 0, mine.numel());
  for (int j : peers(rank)) send(rank, j, call.seq, reduced);
  got = receive(rank, peers(rank), call, deadline);
  Tensor out = call.out;
  for (int j : peers(rank)) {
    const auto u = static_cast<std::size_t>(j);
    out.copy_from_host(got[u].data(), got[u].size(), static_cast<std::size_t>(begin[u]) * es);
  }
}

void LoopbackGroup::reduce_scatter(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const CollectiveSignature& sig = call.signature;
  const std::int64_t k = sig.out_numel;
  for (int j : peers(rank)) send(rank, j, call.seq, pack(call.in, j * k, (j + 1) * k));
  std::vector<Bytes> got = receive(rank, peers(rank), call, deadline);
  std::vector<Tensor> chunks;
  for (int j = 0; j < size(); ++j)
    chunks.push_back(j == rank ? call.in.slice(rank * k, (rank + 1) * k) : unpack(got[static_cast<std::size_t>(j)], sig.dtype));
  reduce_across(sig.op, chunks, {call.out}, 0, k);
}

void LoopbackGroup::all_gather(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const std::int64_t k = call.signature.in_numel;
  const std::size_t es = dtype_size(call.signature.dtype);
  const Bytes mine = pack(call.in, 0, k);
  for (int j : peers(rank)) send(rank, j, call.seq, mine);
  std::vector<Bytes> got = receive(rank, peers(rank), call, deadline);
  got[static_cast<std::size_t>(rank)] = mine;
  Tensor out = call.out;
  for (int j = 0; j < size(); ++j) {
    const auto u = static_cast<std::size_t>(j);
    out.copy_from_host(got[u].data(), got[u].size(), static_cast<std::size_t>(j * k) * es);
  }
}

void LoopbackGroup::broadcast(int rank, const CollectiveCall& call, const Deadline& deadline) {
  const int root = call.signature.root;
  if (rank == root) {
    const Bytes mine = pack(call.in, 0, call.signature.in_numel);
    for (int j : peers(rank)) send(rank, j, call.seq, mine);
    return;
  }
  std::vector<Bytes> got = receive(rank, {root}, call, deadline);
  const Bytes& b = got[static_cast<std::size_t>(root)];
  Tensor out = call.out;
  out.copy_from_host(b.data(), b.size());
}

}  // namespace lockstep::distribute
