#pragma once
// CollectiveImplementation::kLoopback: members talk only through messages, byte buffers in
// per-(sender, receiver) mailboxes, as they would over a network; no member reads another
// member's tensor. It runs the shared-memory algorithm's chunks and member order, so both
// implementations give bit-identical results.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "distribute/group_base.hpp"

namespace lockstep::distribute {

class LoopbackGroup final : public GroupBase {
 public:
  LoopbackGroup(int size, const CollectiveOptions& options);
  ~LoopbackGroup() override;

 protected:
  void run(int rank, const CollectiveCall& call, const Deadline& deadline) override;
  void wake_transport() override;
  void reset_transport() override;

 private:
  using Bytes = std::vector<std::byte>;
  struct Message {
    std::uint64_t seq = 0;
    Bytes bytes;
  };
  /// A member's incoming mailboxes, one per sender, each first in first out.
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::deque<Message>> from;
  };

  void send(int from, int to, std::uint64_t seq, Bytes bytes);
  /// The next message from each member in `senders` (result indexed by member; others empty).
  /// Waits until `deadline`, then fails the group naming the senders that never sent.
  std::vector<Bytes> receive(int rank, const std::vector<int>& senders, const CollectiveCall& call,
                             const Deadline& deadline);
  /// Elements [begin, end) of t as bytes.
  static Bytes pack(const Tensor& t, std::int64_t begin, std::int64_t end);
  /// A fresh flat tensor of `dtype` holding `bytes`.
  static Tensor unpack(const Bytes& bytes, DType dtype);

  std::vector<int> peers(int rank) const;
  void exchange_signatures(int rank, const CollectiveCall& call, const Deadline& deadline);
  void all_reduce(int rank, const CollectiveCall& call, const Deadline& deadline);
  void reduce_scatter(int rank, const CollectiveCall& call, const Deadline& deadline);
  void all_gather(int rank, const CollectiveCall& call, const Deadline& deadline);
  void broadcast(int rank, const CollectiveCall& call, const Deadline& deadline);

  std::vector<std::unique_ptr<Inbox>> inboxes_;
};

}  // namespace lockstep::distribute
