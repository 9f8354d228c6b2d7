#pragma once
// Dataset: an input pipeline in the manner of tf.data.
//
//   auto ds = Dataset::from_tensor_slices(train.x, train.y).shuffle(60000).batch(64).repeat();
//   for (auto& batch : ds.take(100)) { ... batch[0] is (64, 28, 28) uint8, batch[1] is (64,) }
//
// A Dataset is a cheap handle on an immutable node graph (see dataset_node.hpp): copies share
// the graph, transformations return new handles and leave the original unchanged, and every
// iteration (make_iterator() or range-for) is a new pass independent of any other.
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>

#include "lockstep/data/dataset_node.hpp"

namespace lockstep::data {

/// Passed for num_parallel_calls, a prefetch buffer size or interleave's parallelism: chosen
/// and adjusted at run time, within the process's ThreadBudget (thread_budget.hpp).
inline constexpr std::int64_t kAutotune = -1;

/// A generator yields a pass's elements, then std::nullopt.
using Generator = std::function<std::optional<Element>()>;
using MapFn = std::function<Element(Element)>;
using Predicate = std::function<bool(const Element&)>;

class Dataset;
using InterleaveFn = std::function<Dataset(const Element&)>;

class Dataset {
 public:
  /// Elements are the rows (slices along dimension 0) of `components`, which must all have
  /// rank >= 1 and the same first dimension (ValueError naming the shapes otherwise).
  /// Aliasing: the dataset refers to the tensors, it does not copy them; elements of an
  /// unbatched dataset are views on them. Do not write into them while iterating.
  static Dataset from_tensor_slices(std::vector<Tensor> components);
  static Dataset from_tensor_slices(const Tensor& x);
  static Dataset from_tensor_slices(const Tensor& x, const Tensor& y);

  /// Elements from a generator. `make_generator` is called once per pass (each epoch, each
  /// iterator) and must return a fresh generator starting from the beginning; it and the
  /// generators it returns run on the thread that iterates, or on a pipeline thread when a
  /// parallel stage sits above (then they must not touch state shared with other passes
  /// without locking). `cardinality` is what cardinality() reports (unknown by default).
  /// A generator that throws gives FunctionError naming the element's index.
  static Dataset from_generator(std::function<Generator()> make_generator,
                                std::int64_t cardinality = kUnknownCardinality);
  /// Scalars start, start + step, ... up to stop (exclusive), as int64 tensors of shape ().
  /// step != 0 (ValueError); step < 0 counts down.
  static Dataset range(std::int64_t start, std::int64_t stop, std::int64_t step = 1);
  static Dataset range(std::int64_t stop) { return range(0, stop, 1); }
  /// Element i is the components of element i of every dataset, in order (flat: zipping
  /// {x} and {y, z} gives {x, y, z}). Ends with the shortest. Each dataset must keep the
  /// number of components and their dtypes of its first element, or the components would
  /// shift: ValueError naming the dataset and the element otherwise.
  static Dataset zip(const std::vector<Dataset>& datasets);

  /// Wraps a node; how new transformations and sources plug in.
  explicit Dataset(std::shared_ptr<const DatasetNode> node);

  /// tf.data's shuffle buffer: fills a buffer of `buffer_size` elements and emits a uniformly
  /// chosen one, refilling its slot from the input. buffer_size >= the dataset's size gives a
  /// uniform permutation. The order depends only on `seed` and on how many passes were made
  /// before: seed 0 is a seed like any other, so runs are reproducible unless the caller passes
  /// a fresh seed (and every worker of a multi-worker job sees the same order, which shard
  /// after shuffle needs). With reshuffle_each_iteration each pass (each epoch under repeat)
  /// gets a new order; without it every pass repeats the first one.
  Dataset shuffle(std::int64_t buffer_size, std::uint64_t seed = 0,
                  bool reshuffle_each_iteration = true) const;
  /// Stacks `batch_size` consecutive elements into one, component by component: a batch of
  /// shape (batch_size, ...) per component. The last batch is smaller unless drop_remainder.
  /// Elements whose dtypes or shapes differ throw ValueError naming the element's index.
  Dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;
  /// Repeats the input `count` times; -1 repeats forever. An empty input stays empty.
  Dataset repeat(std::int64_t count = -1) const;
  /// At most the first `count` elements; -1 takes all.
  Dataset take(std::int64_t count) const;

  /// This dataset's elements, then `other`'s, which must have the same number of components
  /// and dtypes (ValueError naming the element of `other` otherwise; shapes may differ).
  Dataset concatenate(const Dataset& other) const;
  /// fn applied to every element. num_parallel_calls: 1 calls fn on the iterating thread;
  /// n > 1 calls it on n pipeline threads at once; kAutotune picks and adjusts the number at
  /// run time within the ThreadBudget. With deterministic, elements come out in input order
  /// (a reorder buffer holds those finished early); without, as they finish. fn must be
  /// thread-safe when run in parallel; it may call tensor ops (they run on a one-thread input
  /// context, never on the compute pools). A throwing fn gives FunctionError naming the
  /// element's index in map's input and carrying the original message; the pass then ends.
  Dataset map(MapFn fn, std::int64_t num_parallel_calls = 1, bool deterministic = true) const;
  /// Component `component` of every element, an integer tensor (uint8 pixels), becomes
  /// float32(x) * scale, rounded once (cast_and_scale): TF's
  /// `ds.map(lambda x, y: (tf.cast(x, tf.float32) * scale, y))`, or Keras' Rescaling in the
  /// pipeline. Unlike such a map, batch() still gathers rows straight from the tensors of
  /// from_tensor_slices below it (shuffle, repeat, take, skip, shard in between), casting in the
  /// same pass: the rows are read as stored, a quarter of the bytes of their floats for uint8.
  /// A floating component, or one out of range, is a ValueError (here where the rows' source is
  /// known, else at the element).
  Dataset cast_and_scale(float scale, std::size_t component = 0) const;
  /// Keeps the elements for which pred is true. cardinality() is then unknown.
  Dataset filter(Predicate pred) const;
  /// Splits every element along dimension 0 into its rows; all components of one element must
  /// have the same first dimension (ValueError naming the element otherwise).
  Dataset unbatch() const;
  /// Drops the first `count` elements; -1 drops all.
  Dataset skip(std::int64_t count) const;
  /// Prepends an int64 scalar counter start, start + 1, ... to every element: {i, x, y}.
  Dataset enumerate(std::int64_t start = 0) const;
  /// Element i of every pass goes to shard i % num_shards; this dataset is shard `index`.
  /// Shards partition the input: disjoint, and together all of it. Shard after shuffle only
  /// with a fixed seed shared by every shard (the default), or shards overlap.
  Dataset shard(std::int64_t num_shards, std::int64_t index) const;
  /// In-memory cache. The first pass that runs to the end records the elements; later passes
  /// replay them without running anything upstream. A pass abandoned midway records nothing.
  /// Replayed elements share storage with the recorded ones: do not write into them.
  Dataset cache() const;
  /// File cache at `path`. A pass finds the file valid and replays it, or else runs upstream
  /// and writes the file (under a temporary name, renamed when the pass ends, so a crash or an
  /// abandoned pass never leaves a file that is used). A file is valid when its header holds
  /// this pipeline's fingerprint (every node's description, and the shapes, dtypes and a hash
  /// of the bytes of from_tensor_slices' tensors) and its footer's element count, size and
  /// checksum match. A stale file (another pipeline, other data) or a damaged one (truncated,
  /// corrupt) is rebuilt, silently: it is a cache. What the fingerprint cannot see: the code of
  /// map/filter/generator functions; change the path when you change them.
  Dataset cache(const std::string& path) const;
  /// Runs the pipeline above on a background thread, `buffer_size` elements ahead (a bounded
  /// buffer). 0 passes elements through; kAutotune grows the buffer while the consumer waits,
  /// within ThreadBudget::buffer_bytes(). Errors from upstream come out at their position.
  /// Destroying the iterator stops and joins the thread (after the element it is producing).
  Dataset prefetch(std::int64_t buffer_size) const;
  /// For every input element, fn gives a dataset; cycle_length of them are read at once,
  /// block_length elements from each in turn (a finished one is replaced by the next input
  /// element's). The order is deterministic for any num_parallel_calls: 1 reads on the
  /// iterating thread; n > 1 (or kAutotune) reads the open datasets on pipeline threads, each a
  /// few blocks ahead. cycle_length kAutotune: the number of cores.
  Dataset interleave(InterleaveFn fn, std::int64_t cycle_length = kAutotune, std::int64_t block_length = 1,
                     std::int64_t num_parallel_calls = 1) const;

  std::unique_ptr<Iterator> make_iterator() const;
  /// The pass as batches whose rows are not copied yet (DatasetNode::make_row_batch_iterator),
  /// or null when the pipeline is not batch() over rows of tensors, possibly followed by
  /// prefetch, repeat and take. Its batches gathered equal make_iterator()'s elements.
  std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const;
  /// Number of elements, kInfiniteCardinality (-1) or kUnknownCardinality (-2).
  std::int64_t cardinality() const;
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }

  /// Input iterator for range-for; each begin() starts a new pass.
  class RangeIterator {
   public:
    using value_type = Element;
    using difference_type = std::ptrdiff_t;
    RangeIterator() = default;
    explicit RangeIterator(std::shared_ptr<Iterator> it);
    Element& operator*() const { return *current_; }
    Element* operator->() const { return &*current_; }
    RangeIterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return !current_; }

   private:
    std::shared_ptr<Iterator> it_;
    // mutable: operator* of an input iterator is const yet hands out a mutable element.
    mutable std::optional<Element> current_;
  };
  RangeIterator begin() const;
  std::default_sentinel_t end() const { return {}; }

 private:
  std::shared_ptr<const DatasetNode> node_;
};

}  // namespace lockstep::data
