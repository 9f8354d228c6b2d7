// shuffle: tf.data's shuffle buffer, over elements or, on the fast path, over row indices.
#include <cstring>
#include <algorithm>
#include <atomic>

#include "data/nodes.hpp"
#include "data/random.hpp"

namespace lockstep::data::detail {

namespace {

template <typename T>
class ShuffleIterator final : public BasicIterator<T> {
 public:
  ShuffleIterator(std::unique_ptr<BasicIterator<T>> input, std::int64_t buffer_size, std::size_t reserve,
                  std::uint64_t seed)
      : input_(std::move(input)), buffer_size_(static_cast<std::size_t>(buffer_size)), rng_(seed), scout_(seed) {
    buffer_.reserve(reserve);
  }

  std::optional<T> next() override {
    if (!filled_) {
      filled_ = true;
      while (input_ && buffer_.size() < buffer_size_) {
        if (auto e = input_->next()) {
          buffer_.push_back(std::move(*e));
        } else {
          input_.reset();
        }
      }
      // The scout starts kAhead draws ahead of the generator, over the full buffer's slots.
      draining_ = !input_;
      for (std::uint64_t k = 0, size = buffer_.size(); k < kAhead && k < size; ++k) scout(draining_ ? size - k : size);
    }
    if (buffer_.empty()) return std::nullopt;
    const std::uint64_t bound = buffer_.size();
    const std::size_t i = rng_.below(bound);
    scout(draining_ ? bound - std::min<std::uint64_t>(bound, kAhead) : bound);
    std::optional<T> out(std::move(buffer_[i]));
    std::optional<T> refill = input_ ? input_->next() : std::nullopt;
    if (refill) {
      buffer_[i] = std::move(*refill);
    } else {
      input_.reset();
      if (i + 1 != buffer_.size()) buffer_[i] = std::move(buffer_.back());
      buffer_.pop_back();
      if (!draining_) start_draining();
    }
    return out;
  }

 private:
  // Which slot a draw takes depends on the generator and the buffer's size alone, not on what
  // the buffer holds, and the size is known ahead: constant while the input refills the buffer,
  // one less per draw once it has run out. So a copy of the generator kAhead draws ahead names
  // the slot a later draw takes, and that slot is fetched meanwhile. The slots of a 60,000-row
  // buffer are random reads that miss in cache: 128 of them were 5 us of fit's serial work
  // between two steps of the replicas. A prefetch only: the order is the generator's as before.
  static constexpr std::uint64_t kAhead = 32;
  // The scout's next draw, for the draw kAhead later; `bound` is the buffer's size then (0: none).
  void scout(std::uint64_t bound) {
    if (bound > 0) __builtin_prefetch(&buffer_[scout_.below(bound)]);
  }
  // The input ran out: from now on each draw is from one slot fewer. The scout restarts from
  // the generator, drawing for the next kAhead draws.
  void start_draining() {
    draining_ = true;
    scout_ = rng_;
    const std::uint64_t size = buffer_.size();
    for (std::uint64_t k = 0; k < kAhead && k < size; ++k) scout(size - k);
  }

 private:
  std::unique_ptr<BasicIterator<T>> input_;  // null once exhausted
  std::size_t buffer_size_;
  std::vector<T> buffer_;
  Rng rng_;
  Rng scout_;  // rng_ kAhead draws ahead (a copy, reseeded alike)
  bool draining_ = false;  // the input has run out: the buffer shrinks by one per draw
  bool filled_ = false;
};

class ShuffleNode final : public DatasetNode {
 public:
  ShuffleNode(NodePtr input, std::int64_t buffer_size, std::uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}

  std::unique_ptr<Iterator> make_iterator() const override {
    return make<Element>(input_->make_iterator());
  }
  std::unique_ptr<IndexIterator> make_index_iterator() const override {
    if (!input_->row_source()) return nullptr;
    return make<std::int64_t>(input_->make_index_iterator());
  }
  const RowSource* row_source() const override { return input_->row_source(); }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return "shuffle(buffer_size=" + std::to_string(buffer_size_) + ")"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }
  std::string fingerprint_part() const override {
    return name() + "[seed=" + std::to_string(seed_) + (reshuffle_ ? ",reshuffle]" : "]");
  }

 private:
  template <typename T>
  std::unique_ptr<BasicIterator<T>> make(std::unique_ptr<BasicIterator<T>> input) const {
    // Pass k of a reshuffling dataset uses seed (seed_, k); copies of the Dataset share the
    // node and so the count, as iterating one tf.data dataset object twice reshuffles.
    std::uint64_t state = seed_;
    const std::uint64_t pass = reshuffle_ ? passes_.fetch_add(1, std::memory_order_relaxed) : 0;
    std::uint64_t mixed = splitmix64(state) ^ pass;
    const std::uint64_t pass_seed = splitmix64(mixed);
    const std::int64_t n = input_->cardinality();
    // Reserve what the buffer will hold when that is known, but never trust a huge buffer_size.
    const std::size_t reserve = static_cast<std::size_t>(
        n >= 0 ? std::min(n, buffer_size_) : std::min<std::int64_t>(buffer_size_, std::int64_t{1} << 16));
    return std::make_unique<ShuffleIterator<T>>(std::move(input), buffer_size_, reserve, pass_seed);
  }

  NodePtr input_;
  std::int64_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
  mutable std::atomic<std::uint64_t> passes_{0};
};

}  // namespace

NodePtr make_shuffle_node(NodePtr input, std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration) {
  LOCKSTEP_CHECK(buffer_size >= 1, "Dataset::shuffle: buffer_size must be >= 1, got ", buffer_size);
  return std::make_shared<ShuffleNode>(std::move(input), buffer_size, seed, reshuffle_each_iteration);
}

}  // namespace lockstep::data::detail
