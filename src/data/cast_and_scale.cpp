// cast_and_scale: an integer component of every element becomes float32(x) * scale. Over a
// row-selection chain it is part of the row source, so batch gathers the rows as stored and
// casts them in the same pass: uint8 pixels are read as a quarter of the bytes of their floats.
#include <cstdio>

#include "data/nodes.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::data::detail {

namespace {

constexpr const char* kWho = "Dataset::cast_and_scale";

class CastAndScaleIterator final : public Iterator {
 public:
  CastAndScaleIterator(std::unique_ptr<Iterator> input, std::size_t component, float scale)
      : input_(std::move(input)), component_(component), scale_(scale) {}
  std::optional<Element> next() override {
    auto e = input_->next();
    if (!e) return std::nullopt;
    LOCKSTEP_CHECK(component_ < e->size(), kWho, ": component ", component_, " is out of range: element ", index_,
                   " has ", e->size(), " components");
    Tensor& x = (*e)[component_];
    LOCKSTEP_CHECK(!is_floating(x.dtype()), kWho, ": component ", component_, " of element ", index_, " is ",
                   dtype_name(x.dtype()), "; it casts integer tensors (uint8 pixels) to float32");
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
      LOCKSTEP_CHECK(component_ < in->size(), kWho, ": component ", component_, " is out of range: the elements have ",
                     in->size(), " components");
      LOCKSTEP_CHECK(!is_floating(in->dtype(component_)), kWho, ": component ", component_, " is ",
                     dtype_name(in->dtype(component_)), "; it casts integer tensors (uint8 pixels) to float32");
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
