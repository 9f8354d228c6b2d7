// from_tensor_slices: the elements are the rows of fixed tensors.
#include "data/fingerprint.hpp"
#include "data/nodes.hpp"

namespace lockstep::data::detail {

namespace {

class SliceIterator final : public Iterator {
 public:
  SliceIterator(std::shared_ptr<const DatasetNode> owner, const std::vector<Tensor>& components)
      : owner_(std::move(owner)), components_(components) {
    for (const auto& c : components_) row_shapes_.push_back(c.shape().tail());
  }
  std::optional<Element> next() override {
    if (components_.empty() || next_ >= components_[0].dim(0)) return std::nullopt;
    Element e;
    e.reserve(components_.size());
    for (std::size_t c = 0; c < components_.size(); ++c) {
      Tensor row = components_[c].slice(next_, next_ + 1);
      // The slice is ours alone, so drop its leading 1 in place rather than pay for a second
      // view through reshape.
      row.impl()->shape = row_shapes_[c];
      e.push_back(std::move(row));
    }
    ++next_;
    return e;
  }

 private:
  std::shared_ptr<const DatasetNode> owner_;  // keeps components_ alive
  const std::vector<Tensor>& components_;
  std::vector<Shape> row_shapes_;
  std::int64_t next_ = 0;
};

class RangeIndexIterator final : public IndexIterator {
 public:
  explicit RangeIndexIterator(std::int64_t n) : n_(n) {}
  std::optional<std::int64_t> next() override {
    if (next_ >= n_) return std::nullopt;
    return next_++;
  }

 private:
  std::int64_t n_;
  std::int64_t next_ = 0;
};

class TensorSlicesNode final : public DatasetNode, public std::enable_shared_from_this<TensorSlicesNode> {
 public:
  explicit TensorSlicesNode(std::vector<Tensor> components) : rows_{.tensors = std::move(components), .scales = {}} {}
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<SliceIterator>(shared_from_this(), rows_.tensors);
  }
  std::int64_t cardinality() const override { return rows_.tensors[0].dim(0); }
  std::string name() const override { return "from_tensor_slices"; }
  std::string fingerprint_part() const override { return name() + tensors_signature(rows_.tensors); }
  const RowSource* row_source() const override { return &rows_; }
  std::unique_ptr<IndexIterator> make_index_iterator() const override {
    return std::make_unique<RangeIndexIterator>(cardinality());
  }

 private:
  RowSource rows_;
};

}  // namespace

NodePtr make_tensor_slices_node(std::vector<Tensor> components) {
  LOCKSTEP_CHECK(!components.empty(), "Dataset::from_tensor_slices: needs at least one tensor");
  std::string shapes;
  bool same = true;
  for (std::size_t i = 0; i < components.size(); ++i) {
    const Tensor& c = components[i];
    LOCKSTEP_CHECK(c.defined(), "Dataset::from_tensor_slices: tensor ", i, " is undefined");
    LOCKSTEP_CHECK(c.rank() >= 1, "Dataset::from_tensor_slices: tensor ", i,
                   " is a scalar; every tensor needs a first dimension to slice along");
    LOCKSTEP_CHECK(c.device().kind == DeviceKind::kCpu, "Dataset::from_tensor_slices: tensor ", i, " is on ",
                   c.device().str(), "; datasets hold host tensors");
    same = same && c.dim(0) == components[0].dim(0);
    shapes += (i ? " and " : "") + c.shape().str();
  }
  LOCKSTEP_CHECK(same, "Dataset::from_tensor_slices: tensors must have the same first dimension, got shapes ",
                 shapes);
  return std::make_shared<TensorSlicesNode>(std::move(components));
}

}  // namespace lockstep::data::detail
