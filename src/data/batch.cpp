// batch: stacks consecutive elements. Over a row-selection chain (from_tensor_slices, shuffle,
// repeat, take) it gathers rows of the source tensors straight into the batch (gather_rows:
// one copy per run of consecutive rows), with no per-row tensor, or hands the rows over
// ungathered (RowBatch); otherwise it stacks the elements it gets.
#include <algorithm>

#include "data/nodes.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::data::detail {

namespace {

// Never reserve more than this many rows ahead: batch_size may be absurdly large.
constexpr std::int64_t kMaxReserve = 1 << 16;

// The batches of a row-selection chain as row indices (RowBatch); gathering them is the
// consumer's (GatherBatchIterator below, or fit's replicas).
class RowBatchMaker final : public RowBatchIterator {
 public:
  RowBatchMaker(NodePtr input, std::int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)),
        indices_(input_->make_index_iterator()),
        batch_size_(batch_size),
        drop_remainder_(drop_remainder) {}

  std::optional<RowBatch> next() override {
    RowBatch b{.owner = input_, .sources = input_->row_source(), .rows = {}};
    b.rows.reserve(static_cast<std::size_t>(std::min(batch_size_, kMaxReserve)));
    while (indices_ && b.size() < batch_size_) {
      if (auto i = indices_->next()) {
        b.rows.push_back(*i);
      } else {
        indices_.reset();
      }
    }
    if (b.size() == 0 || (drop_remainder_ && b.size() < batch_size_)) return std::nullopt;
    return b;
  }

 private:
  NodePtr input_;  // owns the sources
  std::unique_ptr<IndexIterator> indices_;  // null once exhausted
  std::int64_t batch_size_;
  bool drop_remainder_;
};

class GatherBatchIterator final : public Iterator {
 public:
  explicit GatherBatchIterator(std::unique_ptr<RowBatchIterator> batches) : batches_(std::move(batches)) {}

  std::optional<Element> next() override {
    auto b = batches_->next();
    if (!b) return std::nullopt;
    return b->gather();
  }

 private:
  std::unique_ptr<RowBatchIterator> batches_;
};

class StackBatchIterator final : public Iterator {
 public:
  StackBatchIterator(std::unique_ptr<Iterator> input, std::int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {
    elements_.reserve(static_cast<std::size_t>(std::min(batch_size_, kMaxReserve)));
  }

  std::optional<Element> next() override {
    elements_.clear();
    while (input_ && static_cast<std::int64_t>(elements_.size()) < batch_size_) {
      auto e = input_->next();
      if (!e) {
        input_.reset();
        break;
      }
      if (!elements_.empty()) check_matches(*e, elements_.front());
      elements_.push_back(std::move(*e));
      ++consumed_;
    }
    const auto k = static_cast<std::int64_t>(elements_.size());
    if (k == 0 || (drop_remainder_ && k < batch_size_)) return std::nullopt;
    const Element& first = elements_.front();
    Element batch;
    batch.reserve(first.size());
    std::vector<Tensor> column(static_cast<std::size_t>(k));
    for (std::size_t c = 0; c < first.size(); ++c) {
      for (std::int64_t r = 0; r < k; ++r) column[static_cast<std::size_t>(r)] = elements_[static_cast<std::size_t>(r)][c];
      batch.push_back(stack(column));
    }
    return batch;
  }

 private:
  void check_matches(const Element& e, const Element& first) const {
    LOCKSTEP_CHECK(e.size() == first.size(), "Dataset::batch: element ", consumed_, " has ", e.size(),
                   " components but element ", consumed_ - elements_.size(), " (first of its batch) has ",
                   first.size());
    for (std::size_t c = 0; c < e.size(); ++c) {
      LOCKSTEP_CHECK(e[c].dtype() == first[c].dtype() && e[c].shape() == first[c].shape(), "Dataset::batch: element ",
                     consumed_, " component ", c, " is ", dtype_name(e[c].dtype()), " ", e[c].shape().str(),
                     " but element ", consumed_ - elements_.size(), " (first of its batch) is ",
                     dtype_name(first[c].dtype()), " ", first[c].shape().str(),
                     "; elements of one batch must have equal dtypes and shapes");
    }
  }

  std::unique_ptr<Iterator> input_;  // null once exhausted
  std::int64_t batch_size_;
  bool drop_remainder_;
  std::vector<Element> elements_;
  std::int64_t consumed_ = 0;  // input elements so far: the index errors name
};

class BatchNode final : public DatasetNode {
 public:
  BatchNode(NodePtr input, std::int64_t batch_size, bool drop_remainder)
      : input_(std::move(input)), batch_size_(batch_size), drop_remainder_(drop_remainder) {}

  std::unique_ptr<Iterator> make_iterator() const override {
    if (auto rows = make_row_batch_iterator()) return std::make_unique<GatherBatchIterator>(std::move(rows));
    return std::make_unique<StackBatchIterator>(input_->make_iterator(), batch_size_, drop_remainder_);
  }
  bool row_batches() const override { return input_->row_source() != nullptr; }
  std::unique_ptr<RowBatchIterator> make_row_batch_iterator() const override {
    if (!row_batches()) return nullptr;
    return std::make_unique<RowBatchMaker>(input_, batch_size_, drop_remainder_);
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    if (n < 0) return n;
    return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
  }
  std::vector<NodePtr> inputs() const override { return {input_}; }
  std::string name() const override {
    return "batch(batch_size=" + std::to_string(batch_size_) + (drop_remainder_ ? ", drop_remainder=true)" : ")");
  }

 private:
  NodePtr input_;
  std::int64_t batch_size_;
  bool drop_remainder_;
};

}  // namespace

NodePtr make_batch_node(NodePtr input, std::int64_t batch_size, bool drop_remainder) {
  LOCKSTEP_CHECK(batch_size >= 1, "Dataset::batch: batch_size must be >= 1, got ", batch_size);
  return std::make_shared<BatchNode>(std::move(input), batch_size, drop_remainder);
}

}  // namespace lockstep::data::detail

namespace lockstep::data {

Element RowBatch::gather(std::int64_t begin, std::int64_t end) const {
  LOCKSTEP_CHECK(sources != nullptr, "RowBatch::gather: the batch has no sources");
  LOCKSTEP_CHECK(begin >= 0 && begin <= end && end <= size(), "RowBatch::gather: rows [", begin, ", ", end,
                 ") are outside the batch of ", size());
  const Tensor index = Tensor::from_vector(std::vector<std::int64_t>(rows.begin() + begin, rows.begin() + end),
                                           {end - begin});
  Element out;
  out.reserve(sources->size());
  for (const Tensor& source : *sources) out.push_back(gather_rows(source, index));
  return out;
}

}  // namespace lockstep::data
