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

class DatasetNode;

/// Rows [begin, end) of a RowBatch being gathered ahead of their use (RowBatch::gather_ahead).
/// Dropping it untaken withdraws the work; it must not outlive the compute context it was
/// started on.
class PendingRows {
 public:
  PendingRows(PendingRows&&) noexcept;
  PendingRows& operator=(PendingRows&&) noexcept;
  ~PendingRows();
  std::int64_t begin() const;
  std::int64_t end() const;
  /// What RowBatch::gather(begin, end) returns. The rows no worker has copied yet are copied
  /// here; call it on the thread that started the gather. Once.
  Element take();

 private:
  friend struct RowBatch;
  struct State;
  explicit PendingRows(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

/// Where the rows of a row-selection chain come from (DatasetNode::row_source): fixed tensors,
/// and how a row of each becomes the element's component: as stored, or cast to float32 and
/// scaled (Dataset::cast_and_scale, which the gather then does in the same pass).
struct RowSource {
  std::vector<Tensor> tensors;
  /// Empty, or one per tensor: the scale of a component that is cast to float32, nullopt for
  /// one kept as stored.
  std::vector<std::optional<float>> scales;

  std::size_t size() const { return tensors.size(); }
  std::optional<float> scale(std::size_t c) const { return c < scales.size() ? scales[c] : std::nullopt; }
  /// The dtype of component c in the elements.
  DType dtype(std::size_t c) const;
  /// Component c of rows `index` (1-D int64), as the elements hold it, gathered on the calling
  /// thread's compute context; gather_into writes them into dst ((index.numel(), row...), dtype(c)).
  Tensor gather(std::size_t c, const Tensor& index) const;
  void gather_into(std::size_t c, Tensor& dst, const Tensor& index) const;
};

/// A batch of the row-selection fast path (see DatasetNode::row_source) before its rows are
/// copied: component c of the batch is sources->gather(c, rows). A consumer gathers the
/// parts it needs where it needs them -- fit has every replica gather its own slice on its own
/// core -- and gets exactly what batch() would have given. Holds the node that owns `sources`.
struct RowBatch {
  std::shared_ptr<const DatasetNode> owner;
  const RowSource* sources = nullptr;
  std::vector<std::int64_t> rows;

  std::int64_t size() const { return static_cast<std::int64_t>(rows.size()); }
  /// Every component's rows [begin, end) of the batch, gathered on the calling thread's
  /// compute context: equal to slicing the batch that batch() makes.
  Element gather(std::int64_t begin, std::int64_t end) const;
  Element gather() const { return gather(0, size()); }
  /// Rows [begin, end) of every component as the source tensors store them (no cast: uint8
  /// pixels stay uint8), gathered into host memory on the calling thread whatever context it
  /// computes on: what a replica on a GPU copies to its device, where RowSource::scale's cast
  /// is done (datasets hold host tensors: from_tensor_slices takes no other).
  Element gather_stored(std::int64_t begin, std::int64_t end) const;
  /// The same rows into `out` (one tensor per component): a defined one, host memory of the
  /// rows' shape and dtype as stored, is written in place (a staging block the copy to the
  /// device reads: DeviceUpload::stage); an undefined one becomes a new host tensor.
  void gather_stored_into(std::int64_t begin, std::int64_t end, Element& out) const;
  /// Starts gathering rows [begin, end) on the calling thread's compute context, to be taken
  /// later on this thread. Where that context is a CPU pool with workers, they copy the rows in
  /// short chunks while they would otherwise wait between two ops: fit gathers a replica's
  /// slice of the next batch so while the replica trains on this one. `caller_waits`: the
  /// calling thread will also wait for others before it takes the rows (a replica for its peers),
  /// and copies chunks meanwhile (backend::help_idle_work), so a pool of one thread takes
  /// the work too. Elsewhere take() gathers.
  PendingRows gather_ahead(std::int64_t begin, std::int64_t end, bool caller_waits = false) const;
};
using RowBatchIterator = BasicIterator<RowBatch>;

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
  /// merely choose and order rows (shuffle, repeat, take) or cast and scale them
  /// (cast_and_scale) yields rows of fixed source tensors. Such a node returns those tensors
  /// here and streams the row indices from make_index_iterator(), so that batch gathers rows
  /// with one memcpy each instead of building a view per row and per component. Every other
  /// node keeps these defaults (no fast path).
  virtual const RowSource* row_source() const { return nullptr; }
  virtual std::unique_ptr<IndexIterator> make_index_iterator() const { return nullptr; }
  /// The same fast path one level up: batch() over a row source streams its batches as
  /// RowBatch, and prefetch, repeat and take above it pass them on (prefetch without a thread:
  /// making a RowBatch costs only its indices). row_batches() says so without starting a pass
  /// (a pass counts: shuffle's order depends on how many came before); make_row_batch_iterator()
  /// is null where it is false.
  virtual bool row_batches() const { return false; }
  virtual std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const { return nullptr; }
};

}  // namespace lockstep::data
