// filter, skip and shard: they keep some elements and drop others. skip and shard only count,
// so, like take, they also run over row indices and keep batch's gather fast path.
#include "data/nodes.hpp"
#include "data/worker.hpp"

namespace lockstep::data::detail {

namespace {

class FilterIterator final : public Iterator {
 public:
  FilterIterator(std::unique_ptr<Iterator> input, std::shared_ptr<const Predicate> pred)
      : input_(std::move(input)), pred_(std::move(pred)) {}
  std::optional<Element> next() override {
    while (input_) {
      auto e = input_->next();
      if (!e) break;
      bool keep = false;
      try {
        keep = (*pred_)(*e);
      } catch (...) {
        input_.reset();
        std::rethrow_exception(function_error("Dataset::filter", index_));
      }
      ++index_;
      if (keep) return e;
    }
    input_.reset();
    return std::nullopt;
  }

 private:
  std::unique_ptr<Iterator> input_;  // null once done
  std::shared_ptr<const Predicate> pred_;  // shared: the iterator may outlive the Dataset
  std::int64_t index_ = 0;
};

class FilterNode final : public DatasetNode {
 public:
  FilterNode(NodePtr input, Predicate pred)
      : input_(std::move(input)), pred_(std::make_shared<const Predicate>(std::move(pred))) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<FilterIterator>(input_->make_iterator(), pred_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    return n == 0 || n == kInfiniteCardinality ? n : kUnknownCardinality;
  }
  std::string name() const override { return "filter"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::shared_ptr<const Predicate> pred_;
};

template <typename T>
class SkipIterator final : public BasicIterator<T> {
 public:
  SkipIterator(std::unique_ptr<BasicIterator<T>> input, std::int64_t count) : input_(std::move(input)), left_(count) {}
  std::optional<T> next() override {
    if (!input_) return std::nullopt;
    while (left_ != 0) {
      if (!input_->next()) {
        input_.reset();
        return std::nullopt;
      }
      if (left_ > 0) --left_;
    }
    auto e = input_->next();
    if (!e) input_.reset();
    return e;
  }

 private:
  std::unique_ptr<BasicIterator<T>> input_;
  std::int64_t left_;  // -1: skip all
};

template <typename T>
class ShardIterator final : public BasicIterator<T> {
 public:
  ShardIterator(std::unique_ptr<BasicIterator<T>> input, std::int64_t num, std::int64_t index)
      : input_(std::move(input)), num_(num), index_(index) {}
  std::optional<T> next() override {
    while (input_) {
      auto e = input_->next();
      if (!e) break;
      if (position_++ % num_ == index_) return e;
    }
    input_.reset();
    return std::nullopt;
  }

 private:
  std::unique_ptr<BasicIterator<T>> input_;
  std::int64_t num_, index_;
  std::int64_t position_ = 0;
};

// Skip and shard: pass-through nodes that keep the row-selection fast path.
template <template <typename> class It>
class CountingNode final : public DatasetNode {
 public:
  CountingNode(NodePtr input, std::int64_t a, std::int64_t b) : input_(std::move(input)), a_(a), b_(b) {}
  std::unique_ptr<Iterator> make_iterator() const override { return make<Element>(input_->make_iterator()); }
  std::unique_ptr<IndexIterator> make_index_iterator() const override {
    if (!input_->row_source()) return nullptr;
    return make<std::int64_t>(input_->make_index_iterator());
  }
  const RowSource* row_source() const override { return input_->row_source(); }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (n < 0) return n;
    if constexpr (std::is_same_v<It<Element>, SkipIterator<Element>>) {
      return a_ < 0 ? 0 : std::max<std::int64_t>(0, n - a_);
    } else {
      return n > b_ ? (n - b_ - 1) / a_ + 1 : 0;
    }
  }
  std::string name() const override {
    if constexpr (std::is_same_v<It<Element>, SkipIterator<Element>>) {
      return "skip(count=" + std::to_string(a_) + ")";
    } else {
      return "shard(num_shards=" + std::to_string(a_) + ", index=" + std::to_string(b_) + ")";
    }
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  template <typename T>
  std::unique_ptr<BasicIterator<T>> make(std::unique_ptr<BasicIterator<T>> in) const {
    if constexpr (std::is_same_v<It<T>, SkipIterator<T>>) {
      return std::make_unique<It<T>>(std::move(in), a_);
    } else {
      return std::make_unique<It<T>>(std::move(in), a_, b_);
    }
  }
  NodePtr input_;
  std::int64_t a_, b_;  // skip: count; shard: num_shards, index
};

}  // namespace

NodePtr make_filter_node(NodePtr input, Predicate pred) {
  LOCKSTEP_CHECK(pred != nullptr, "Dataset::filter: the predicate is empty");
  return std::make_shared<FilterNode>(std::move(input), std::move(pred));
}

NodePtr make_skip_node(NodePtr input, std::int64_t count) {
  LOCKSTEP_CHECK(count >= -1, "Dataset::skip: count must be >= 0, or -1 for all; got ", count);
  return std::make_shared<CountingNode<SkipIterator>>(std::move(input), count, 0);
}

NodePtr make_shard_node(NodePtr input, std::int64_t num_shards, std::int64_t index) {
  LOCKSTEP_CHECK(num_shards >= 1, "Dataset::shard: num_shards must be >= 1, got ", num_shards);
  LOCKSTEP_CHECK(index >= 0 && index < num_shards, "Dataset::shard: index must be in [0, ", num_shards, "), got ",
                 index);
  return std::make_shared<CountingNode<ShardIterator>>(std::move(input), num_shards, index);
}

}  // namespace lockstep::data::detail
