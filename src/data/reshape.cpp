// unbatch and enumerate: they change the elements' structure, not which data flows.
#include "data/nodes.hpp"

namespace lockstep::data::detail {

namespace {

class UnbatchIterator final : public Iterator {
 public:
  explicit UnbatchIterator(std::unique_ptr<Iterator> input) : input_(std::move(input)) {}
  std::optional<Element> next() override {
    while (row_ >= rows_) {
      if (!input_) return std::nullopt;
      auto e = input_->next();
      if (!e) {
        input_.reset();
        current_.clear();
        return std::nullopt;
      }
      start(std::move(*e));
    }
    Element out;
    out.reserve(current_.size());
    for (std::size_t c = 0; c < current_.size(); ++c) {
      Tensor row = current_[c].slice(row_, row_ + 1);
      row.impl()->shape = row_shapes_[c];  // the view is ours alone: drop its leading 1 in place
      out.push_back(std::move(row));
    }
    ++row_;
    return out;
  }

 private:
  void start(Element e) {
    LOCKSTEP_CHECK(!e.empty(), "Dataset::unbatch: element ", index_, " has no components");
    row_shapes_.clear();
    for (std::size_t c = 0; c < e.size(); ++c) {
      LOCKSTEP_CHECK(e[c].rank() >= 1, "Dataset::unbatch: element ", index_, " component ", c,
                     " is a scalar; unbatch needs a first dimension to split along");
      LOCKSTEP_CHECK(e[c].dim(0) == e[0].dim(0), "Dataset::unbatch: element ", index_, " component ", c,
                     " has shape ", e[c].shape().str(), " but component 0 has ", e[0].shape().str(),
                     "; every component must have the same first dimension");
      row_shapes_.push_back(e[c].shape().tail());
    }
    rows_ = e[0].dim(0);
    row_ = 0;
    current_ = std::move(e);
    ++index_;
  }

  std::unique_ptr<Iterator> input_;
  Element current_;
  std::vector<Shape> row_shapes_;
  std::int64_t rows_ = 0, row_ = 0;
  std::int64_t index_ = 0;  // input elements so far
};

class UnbatchNode final : public DatasetNode {
 public:
  explicit UnbatchNode(NodePtr input) : input_(std::move(input)) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<UnbatchIterator>(input_->make_iterator());
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    return n == 0 || n == kInfiniteCardinality ? n : kUnknownCardinality;
  }
  std::string name() const override { return "unbatch"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
};

class EnumerateIterator final : public Iterator {
 public:
  EnumerateIterator(std::unique_ptr<Iterator> input, std::int64_t start) : input_(std::move(input)), next_(start) {}
  std::optional<Element> next() override {
    auto e = input_->next();
    if (!e) return std::nullopt;
    Tensor index = Tensor::from_vector(std::vector<std::int64_t>{next_++}, Shape{});
    e->insert(e->begin(), std::move(index));
    return e;
  }

 private:
  std::unique_ptr<Iterator> input_;
  std::int64_t next_;
};

class EnumerateNode final : public DatasetNode {
 public:
  EnumerateNode(NodePtr input, std::int64_t start) : input_(std::move(input)), start_(start) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<EnumerateIterator>(input_->make_iterator(), start_);
  }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return "enumerate(start=" + std::to_string(start_) + ")"; }
  std::vector<NodePtr> inputs() const override { return {input_}; }

 private:
  NodePtr input_;
  std::int64_t start_;
};

}  // namespace

NodePtr make_unbatch_node(NodePtr input) { return std::make_shared<UnbatchNode>(std::move(input)); }
NodePtr make_enumerate_node(NodePtr input, std::int64_t start) {
  return std::make_shared<EnumerateNode>(std::move(input), start);
}

}  // namespace lockstep::data::detail
