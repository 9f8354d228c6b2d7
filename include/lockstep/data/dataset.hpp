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
#include <iterator>
#include <memory>
#include <optional>

#include "lockstep/data/dataset_node.hpp"

namespace lockstep::data {

class Dataset {
 public:
  /// Elements are the rows (slices along dimension 0) of `components`, which must all have
  /// rank >= 1 and the same first dimension (ValueError naming the shapes otherwise).
  /// Aliasing: the dataset refers to the tensors, it does not copy them; elements of an
  /// unbatched dataset are views on them. Do not write into them while iterating.
  static Dataset from_tensor_slices(std::vector<Tensor> components);
  static Dataset from_tensor_slices(const Tensor& x);
  static Dataset from_tensor_slices(const Tensor& x, const Tensor& y);

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

  std::unique_ptr<Iterator> make_iterator() const;
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
