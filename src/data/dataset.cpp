#include "lockstep/data/dataset.hpp"

#include "data/nodes.hpp"

namespace lockstep::data {

Dataset::Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {
  LOCKSTEP_CHECK(node_ != nullptr, "Dataset: null node");
}

Dataset Dataset::from_tensor_slices(std::vector<Tensor> components) {
  return Dataset(detail::make_tensor_slices_node(std::move(components)));
}
Dataset Dataset::from_tensor_slices(const Tensor& x) { return from_tensor_slices(std::vector<Tensor>{x}); }
Dataset Dataset::from_tensor_slices(const Tensor& x, const Tensor& y) {
  return from_tensor_slices(std::vector<Tensor>{x, y});
}

Dataset Dataset::shuffle(std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration) const {
  return Dataset(detail::make_shuffle_node(node_, buffer_size, seed, reshuffle_each_iteration));
}
Dataset Dataset::batch(std::int64_t batch_size, bool drop_remainder) const {
  return Dataset(detail::make_batch_node(node_, batch_size, drop_remainder));
}
Dataset Dataset::repeat(std::int64_t count) const { return Dataset(detail::make_repeat_node(node_, count)); }
Dataset Dataset::take(std::int64_t count) const { return Dataset(detail::make_take_node(node_, count)); }

std::unique_ptr<Iterator> Dataset::make_iterator() const { return node_->make_iterator(); }
std::int64_t Dataset::cardinality() const { return node_->cardinality(); }

Dataset::RangeIterator::RangeIterator(std::shared_ptr<Iterator> it) : it_(std::move(it)), current_(it_->next()) {}

Dataset::RangeIterator& Dataset::RangeIterator::operator++() {
  current_ = it_->next();
  return *this;
}

Dataset::RangeIterator Dataset::begin() const { return RangeIterator(make_iterator()); }

}  // namespace lockstep::data
