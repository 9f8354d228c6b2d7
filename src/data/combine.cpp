// zip and concatenate: datasets side by side, and one after another.
#include <algorithm>

#include "data/nodes.hpp"

namespace lockstep::data::detail {

namespace {

std::string dtypes_str(const Element& e) {
  std::string s = "(";
  for (std::size_t i = 0; i < e.size(); ++i) s += (i ? ", " : "") + std::string(dtype_name(e[i].dtype()));
  return s + ")";
}

bool same_dtypes(const Element& a, const Element& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].dtype() != b[i].dtype()) return false;
  }
  return true;
}

class ZipIterator final : public Iterator {
 public:
  explicit ZipIterator(std::vector<std::unique_ptr<Iterator>> inputs)
      : inputs_(std::move(inputs)), first_(inputs_.size()) {}
  std::optional<Element> next() override {
    if (done_) return std::nullopt;
    Element out;
    for (std::size_t d = 0; d < inputs_.size(); ++d) {
      auto e = inputs_[d]->next();
      if (!e) {
        done_ = true;
        inputs_.clear();  // stop any threads below now, not when the iterator dies
        return std::nullopt;
      }
      if (index_ == 0) {
        first_[d] = *e;
      } else {
        LOCKSTEP_CHECK(same_dtypes(*e, first_[d]), "Dataset::zip: dataset ", d, " element ", index_,
                       " has components ", dtypes_str(*e), " but its element 0 had ", dtypes_str(first_[d]),
                       "; a zipped dataset must keep its components' number and dtypes");
      }
      for (auto& t : *e) out.push_back(std::move(t));
    }
    ++index_;
    return out;
  }

 private:
  std::vector<std::unique_ptr<Iterator>> inputs_;
  std::vector<Element> first_;  // each input's element 0: the structure it must keep
  std::int64_t index_ = 0;
  bool done_ = false;
};

class ZipNode final : public DatasetNode {
 public:
  explicit ZipNode(std::vector<NodePtr> inputs) : inputs_(std::move(inputs)) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    std::vector<std::unique_ptr<Iterator>> its;
    for (const auto& n : inputs_) its.push_back(n->make_iterator());
    return std::make_unique<ZipIterator>(std::move(its));
  }
  std::int64_t cardinality() const override {  // as tf.data's ZipDataset
    std::int64_t n = kInfiniteCardinality;
    for (const auto& in : inputs_) {
      const std::int64_t c = in->cardinality();
      if (c == kUnknownCardinality) return kUnknownCardinality;
      if (c >= 0) n = n < 0 ? c : std::min(n, c);
    }
    return n;
  }
  std::string name() const override { return "zip(" + std::to_string(inputs_.size()) + " datasets)"; }
  std::vector<NodePtr> inputs() const override { return inputs_; }

 private:
  std::vector<NodePtr> inputs_;
};

class ConcatenateIterator final : public Iterator {
 public:
  ConcatenateIterator(NodePtr second, std::unique_ptr<Iterator> first)
      : second_node_(std::move(second)), current_(std::move(first)) {}
  std::optional<Element> next() override {
    while (current_) {
      auto e = current_->next();
      if (e) {
        if (!in_second_) {
          if (!reference_) reference_ = *e;
        } else if (reference_) {
          LOCKSTEP_CHECK(same_dtypes(*e, *reference_), "Dataset::concatenate: element ", index_,
                         " of the second dataset has components ", dtypes_str(*e),
                         " but the first dataset's have ", dtypes_str(*reference_),
                         "; concatenated datasets need the same number of components and dtypes");
        }
        if (in_second_) ++index_;
        return e;
      }
      if (in_second_) {
        current_.reset();
      } else {
        in_second_ = true;
        current_ = second_node_->make_iterator();
      }
    }
    return std::nullopt;
  }

 private:
  NodePtr second_node_;
  std::unique_ptr<Iterator> current_;
  std::optional<Element> reference_;  // an element of the first dataset, to check the second's against
  std::int64_t index_ = 0;            // in the second dataset
  bool in_second_ = false;
};

class ConcatenateNode final : public DatasetNode {
 public:
  ConcatenateNode(NodePtr first, NodePtr second) : first_(std::move(first)), second_(std::move(second)) {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<ConcatenateIterator>(second_, first_->make_iterator());
  }
  std::int64_t cardinality() const override {  // as tf.data's ConcatenateDataset
    const std::int64_t a = first_->cardinality(), b = second_->cardinality();
    if (a == kInfiniteCardinality || b == kInfiniteCardinality) return kInfiniteCardinality;
    if (a == kUnknownCardinality || b == kUnknownCardinality) return kUnknownCardinality;
    return a + b;
  }
  std::string name() const override { return "concatenate"; }
  std::vector<NodePtr> inputs() const override { return {first_, second_}; }

 private:
  NodePtr first_, second_;
};

}  // namespace

NodePtr make_zip_node(std::vector<NodePtr> inputs) {
  LOCKSTEP_CHECK(!inputs.empty(), "Dataset::zip: needs at least one dataset");
  return std::make_shared<ZipNode>(std::move(inputs));
}

NodePtr make_concatenate_node(NodePtr first, NodePtr second) {
  return std::make_shared<ConcatenateNode>(std::move(first), std::move(second));
}

}  // namespace lockstep::data::detail
