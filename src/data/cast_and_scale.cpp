// cast_and_scale: an integer component of every element becomes float32(x) * scale. Over a
// row-selection chain it is part of the row source, so batch gathers the rows as stored and
// casts them in the same pass: uint8 pixels are read as a quarter of the bytes of their floats.
#include <cstdio>
#include <string>

#include "data/nodes.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::data::detail {

namespace {

constexpr const char* kWho = "Dataset::cast_and_scale";

// The rule, wherever it is checked: `component` names one of `components`, and that component
// (dtype_of(component), asked once it exists) is an integer tensor. `element`: the element's
// index where one is checked, -1 where the row source is (the message is built only on failure).
template <typename DTypeOf>
void check_castable(std::size_t component, std::size_t components, DTypeOf&& dtype_of, std::int64_t element) {
  const auto where = [element] { return element < 0 ? std::string() : " of element " + std::to_string(element); };
  const auto holder = [element] {
    return element < 0 ? std::string("the elements have ") : "element " + std::to_string(element) + " has ";
  };
  LOCKSTEP_CHECK(component < components, kWho, ": component ", component, " is out of range: ", holder(), components,
                 " components");
  const DType dtype = dtype_of(component);
  LOCKSTEP_CHECK(!is_floating(dtype), kWho, ": component ", component, where(), " is ", dtype_name(dtype),
                 "; it casts integer tensors (uint8 pixels) to float32");
}

class CastAndScaleIterator final : public Iterator {
 public:
  CastAndScaleIterator(std::unique_ptr<Iterator> input, std::size_t component, float scale)
      : input_(std::move(input)), component_(component), scale_(scale) {}
  std::optional<Element> next() override {
    auto e = input_->next();
    if (!e) return std::nullopt;
    check_castable(component_, e->size(), [&](std::size_t c) { return (*e)[c].dtype(); }, index_);
    Tensor& x = (*e)[component_];
    x = cast_and_scale(x, scale_);
    ++index_;
    return e;
  }

 private:
  std::unique_ptr<Iterator> input_;
  std::size_t component_;
  float scale_;
  std::int64_t index_ = 0;
};

class CastAndScaleNode final : public DatasetNode {
 public:
  CastAndScaleNode(NodePtr input, std::size_t component, float scale)
      : input_(std::move(input)), component_(component), scale_(scale) {
    if (const RowSource* in = input_->row_source()) {
      // Known now: a bad component or dtype fails here, not at the first batch.
      check_castable(component_, in->size(), [in](std::size_t c) { return in->dtype(c); }, -1);
      rows_ = *in;
      rows_->scales.resize(rows_->size());
      rows_->scales[component_] = scale_;
    }
  }
  std::unique_ptr<Iterator> make_iterator() const override {
    return std::make_unique<CastAndScaleIterator>(input_->make_iterator(), component_, scale_);
  }
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::vector<NodePtr> inputs() const override { return {input_}; }
  std::string name() const override {
    char buf[96];  // %.9g: the float exactly, for the cache fingerprint
    std::snprintf(buf, sizeof buf, "cast_and_scale(component=%zu, scale=%.9g)", component_, static_cast<double>(scale_));
    return buf;
  }
  const RowSource* row_source() const override { return rows_ ? &*rows_ : nullptr; }
  std::unique_ptr<IndexIterator> make_index_iterator() const override {
    return rows_ ? input_->make_index_iterator() : nullptr;
  }

 private:
  NodePtr input_;
  std::size_t component_;
  float scale_;
  std::optional<RowSource> rows_;  // the input's, with this component cast
};

}  // namespace

NodePtr make_cast_and_scale_node(NodePtr input, std::size_t component, float scale) {
  return std::make_shared<CastAndScaleNode>(std::move(input), component, scale);
}

}  // namespace lockstep::data::detail
