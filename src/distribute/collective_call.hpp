#pragma once
// One collective as the implementations see it: what every member must agree on (its
// signature), its number in the member's sequence, and the flat tensors it works on.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "lockstep/distribute/reduce_op.hpp"
#include "lockstep/tensor/compute_context.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::distribute {

enum class CollectiveKind : std::uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };

const char* collective_kind_name(CollectiveKind kind);

/// Trivially copyable, so the loopback transport can send it as bytes. Fields a kind does not
/// use hold their defaults, so that comparing two signatures compares only what matters.
struct CollectiveSignature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  std::int32_t root = 0;
  std::int64_t in_numel = 0;
  std::int64_t out_numel = 0;

  bool operator==(const CollectiveSignature&) const = default;
  /// "all_reduce(1000 x float32, sum)"
  std::string str() const;
};

/// A collective whose result is ready only once its device gets there (NCCL: an event on the
/// member's communication stream), made when it starts (GroupBase::prepare).
class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  /// Work queued on `context` from now on runs after the collective (no host wait). Called once,
  /// by the member's Work before it says the collective completed.
  virtual void join(ComputeContext& context) = 0;
};

struct CollectiveCall {
  CollectiveSignature signature;
  std::uint64_t seq = 0;  // 1-based, per member; members agree on it while they are in step
  Tensor in;              // flat views; all_reduce and broadcast: in and out are the same view
  Tensor out;
  std::shared_ptr<DeviceCompletion> device;  // null where the collective completes on the host

  /// "all_reduce #12"
  std::string name() const;
};

/// Member `part`'s chunk [*begin, *end) of `count` elements split over `parts` members:
/// whole 64-byte lines, as even as they go, so that members never write the same cache line.
/// Both implementations use it, so they combine the same elements on the same member.
inline void chunk_range(std::int64_t count, std::size_t element_bytes, int parts, int part, std::int64_t* begin,
                        std::int64_t* end) {
  const std::int64_t per_line = std::max<std::int64_t>(1, 64 / static_cast<std::int64_t>(element_bytes));
  const std::int64_t lines = (count + per_line - 1) / per_line;
  const std::int64_t base = lines / parts, rem = lines % parts;
  const std::int64_t first = part * base + std::min<std::int64_t>(part, rem);
  const std::int64_t last = first + base + (part < rem ? 1 : 0);
  *begin = std::min(count, first * per_line);
  *end = std::min(count, last * per_line);
}

}  // namespace lockstep::distribute
