#pragma once
// The node graph behind Dataset. Each transformation is an immutable DatasetNode holding its
// input node; Dataset is a handle on the last one. Iterating makes a fresh chain of Iterators,
// one per node, each pulling from the one below. New transformations (map, prefetch, shard,
// cache, interleave, ...) are new DatasetNode subclasses; nothing else has to change.
//
// Threads: a node graph is immutable and may be shared and iterated from any number of threads
// at once; one Iterator is used by one thread at a time.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::data {

/// One element of a dataset: a tuple of tensors, e.g. {image, label}.
using Element = std::vector<Tensor>;

/// tf.data's cardinality codes.
inline constexpr std::int64_t kInfiniteCardinality = -1;
inline constexpr std::int64_t kUnknownCardinality = -2;

/// A single pass over a dataset. next() returns std::nullopt at the end, and keeps doing so.
template <typename T>
class BasicIterator {
 public:
  virtual ~BasicIterator() = default;
  virtual std::optional<T> next() = 0;
};
using Iterator = BasicIterator<Element>;
using IndexIterator = BasicIterator<std::int64_t>;

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;

  /// A fresh, independent pass over the elements.
  virtual std::unique_ptr<Iterator> make_iterator() const = 0;
  /// Number of elements, or kInfiniteCardinality / kUnknownCardinality.
  virtual std::int64_t cardinality() const = 0;
  /// For messages: "shuffle(buffer_size=60000)".
  virtual std::string name() const = 0;

  /// The nodes this one reads from (none for a source). Walked to fingerprint a pipeline.
  virtual std::vector<std::shared_ptr<const DatasetNode>> inputs() const { return {}; }
  /// This node's part of the pipeline fingerprint that cache(path) stores to tell a stale
  /// file: by default name(). A source adds what identifies its data (shapes, dtypes and a
  /// hash of the bytes of from_tensor_slices' tensors); a node whose output does not depend on
  /// a parameter leaves it out (map's num_parallel_calls).
  virtual std::string fingerprint_part() const { return name(); }

  /// Row-selection fast path. A chain made only of from_tensor_slices and transformations that
  /// merely choose and order rows (shuffle, repeat, take) yields rows of fixed source tensors.
  /// Such a node returns those tensors here and streams the row indices from
  /// make_index_iterator(), so that batch gathers rows with one memcpy each instead of building
  /// a view per row and per component. Every other node keeps these defaults (no fast path).
  virtual const std::vector<Tensor>* row_source() const { return nullptr; }
  virtual std::unique_ptr<IndexIterator> make_index_iterator() const { return nullptr; }
};

}  // namespace lockstep::data
