// repeat and take: they only count passes and elements, so each is written once over
// elements, row indices and row batches.
#include <algorithm>
#include <functional>

#include "data/nodes.hpp"

namespace lockstep::data::detail {

namespace {

template <typename T>
class RepeatIterator final : public BasicIterator<T> {
 public:
  using Factory = std::function<std::unique_ptr<BasicIterator<T>>()>;
  RepeatIterator(Factory make_input, std::int64_t count) : make_input_(std::move(make_input)), count_(count) {}

  std::optional<T> next() override {
    while (!done_) {
      if (!current_) {
        if (count_ >= 0 && passes_ >= count_) break;
        current_ = make_input_();
        pass_was_empty_ = true;
      }
      if (auto e = current_->next()) {
        pass_was_empty_ = false;
        return e;
      }
      current_.reset();
      ++passes_;
      // An empty input repeated forever would spin here forever; it is empty instead.
      if (pass_was_empty_) break;
    }
    done_ = true;
    return std::nullopt;
  }

 private:
  Factory make_input_;
  std::int64_t count_;
  std::unique_ptr<BasicIterator<T>> current_;
  std::int64_t passes_ = 0;
  bool pass_was_empty_ = true;
  bool done_ = false;
};

template <typename T>
class TakeIterator final : public BasicIterator<T> {
 public:
  TakeIterator(std::unique_ptr<BasicIterator<T>> input, std::int64_t count) : input_(std::move(input)), left_(count) {}

  std::optional<T> next() override {
    if (!input_) return std::nullopt;
    std::optional<T> e;
    if (left_ != 0) e = input_->next();
    if (left_ > 0) --left_;
    // Let go of the input as soon as it is no longer needed: it may hold a large shuffle buffer.
    if (!e || left_ == 0) input_.reset();
    return e;
  }

 private:
  std::unique_ptr<BasicIterator<T>> input_;
  std::int64_t left_;  // -1: all
};

class RepeatNode final : public DatasetNode {
 public:
  RepeatNode(NodePtr input, std::int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<RepeatIterator<Element>>([in = input_] { return in->make_iterator(); }, count_);
  }
  std::unique_ptr<IndexIterator> make_index_iterator() const override {
    if (!input_->row_source()) return nullptr;
    return std::make_unique<RepeatIterator<std::int64_t>>([in = input_] { return in->make_index_iterator(); },
                                                          count_);
  }
  bool row_batches() const override { return input_->row_batches(); }
  std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const override {
    if (!input_->row_batches()) return nullptr;
    return std::make_unique<RepeatIterator<RowBatch>>([in = input_] { return in->make_row_batch_iterator(); }, count_);
  }
  const RowSource* row_source() const override { return input_->row_source(); }
  std::int64_t cardinality() const override {  // as tf.data's RepeatDataset
    const std::int64_t n = input_->cardinality();
    if (count_ < 0) return n == 0 ? 0 : kInfiniteCardinality;
    if (count_ == 0) return 0;
    if (n < 0) return n;
    return n * count_;
  }
  std::string name() const override { return "repeat(count=" + std::to_string(count_) + ")"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::int64_t count_;
};

class TakeNode final : public DatasetNode {
 public:
  TakeNode(NodePtr input, std::int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<TakeIterator<Element>>(input_->make_iterator(), count_);
  }
  std::unique_ptr<IndexIterator> make_index_iterator() const override {
    if (!input_->row_source()) return nullptr;
    return std::make_unique<TakeIterator<std::int64_t>>(input_->make_index_iterator(), count_);
  }
  bool row_batches() const override { return input_->row_batches(); }
  std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const override {
    if (!input_->row_batches()) return nullptr;
    return std::make_unique<TakeIterator<RowBatch>>(input_->make_row_batch_iterator(), count_);
  }
  const RowSource* row_source() const override { return input_->row_source(); }
  std::int64_t cardinality() const override {  // as tf.data's TakeDataset
    const std::int64_t n = input_->cardinality();
    if (count_ < 0) return n;
    if (n == kUnknownCardinality) return n;
    if (n == kInfiniteCardinality) return count_;
    return std::min(n, count_);
  }
  std::string name() const override { return "take(count=" + std::to_string(count_) + ")"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::int64_t count_;
};

}  // namespace

NodePtr make_repeat_node(NodePtr input, std::int64_t count) {
  LOCKSTEP_CHECK(count >= -1, "Dataset::repeat: count must be >= 0, or -1 for forever; got ", count);
  return std::make_shared<RepeatNode>(std::move(input), count);
}

NodePtr make_take_node(NodePtr input, std::int64_t count) {
  LOCKSTEP_CHECK(count >= -1, "Dataset::take: count must be >= 0, or -1 for all; got ", count);
  return std::make_shared<TakeNode>(std::move(input), count);
}

}  // namespace lockstep::data::detail
