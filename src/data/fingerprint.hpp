#pragma once
// Hashing for cache(path): a pipeline's fingerprint (is the cache file stale?) and a running
// checksum of the bytes written (is the cache file intact?).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/data/dataset_node.hpp"

namespace lockstep::data::detail {

/// A 64-bit streaming hash, fixed across platforms and runs (a cache file outlives the
/// process). Not cryptographic: it tells stale or damaged files, not forged ones.
class Hasher {
 public:
  void update(const void* data, std::size_t n);
  void update(const std::string& s) { update(s.data(), s.size()); }
  std::uint64_t digest() const;

 private:
  std::uint64_t state_ = 0x243f6a8885a308d3ull;
  std::uint64_t length_ = 0;
  unsigned char tail_[8] = {};
  std::size_t tail_len_ = 0;
};

/// "[float32 (60000, 28, 28) #9c0d...; int32 (60000,) #...]": the shapes, dtypes and a hash of
/// the bytes of `tensors`, so that new data under the same pipeline makes the cache stale.
std::string tensors_signature(const std::vector<Tensor>& tensors);

/// The whole pipeline ending at `node`, as text: every node's fingerprint_part(), inputs nested.
std::string pipeline_description(const DatasetNode& node);

}  // namespace lockstep::data::detail
