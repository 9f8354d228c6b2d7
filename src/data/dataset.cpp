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

Dataset Dataset::from_generator(std::function<Generator()> make_generator, std::int64_t cardinality) {
  return Dataset(detail::make_generator_node(std::move(make_generator), cardinality));
}
Dataset Dataset::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  return Dataset(detail::make_range_node(start, stop, step));
}
Dataset Dataset::zip(const std::vector<Dataset>& datasets) {
  std::vector<detail::NodePtr> nodes;
  for (const auto& d : datasets) nodes.push_back(d.node());
  return Dataset(detail::make_zip_node(std::move(nodes)));
}
Dataset Dataset::concatenate(const Dataset& other) const {
  return Dataset(detail::make_concatenate_node(node_, other.node()));
}
Dataset Dataset::cast_and_scale(float scale, std::size_t component) const {
  return Dataset(detail::make_cast_and_scale_node(node_, component, scale));
}

Dataset Dataset::map(MapFn fn, std::int64_t num_parallel_calls, bool deterministic) const {
  return Dataset(detail::make_map_node(node_, std::move(fn), num_parallel_calls, deterministic));
}
Dataset Dataset::filter(Predicate pred) const { return Dataset(detail::make_filter_node(node_, std::move(pred))); }
Dataset Dataset::unbatch() const { return Dataset(detail::make_unbatch_node(node_)); }
Dataset Dataset::skip(std::int64_t count) const { return Dataset(detail::make_skip_node(node_, count)); }
Dataset Dataset::enumerate(std::int64_t start) const { return Dataset(detail::make_enumerate_node(node_, start)); }
Dataset Dataset::shard(std::int64_t num_shards, std::int64_t index) const {
  return Dataset(detail::make_shard_node(node_, num_shards, index));
}
Dataset Dataset::cache() const { return Dataset(detail::make_memory_cache_node(node_)); }
Dataset Dataset::cache(const std::string& path) const { return Dataset(detail::make_file_cache_node(node_, path)); }
Dataset Dataset::prefetch(std::int64_t buffer_size) const {
  return Dataset(detail::make_prefetch_node(node_, buffer_size));
}
Dataset Dataset::interleave(InterleaveFn fn, std::int64_t cycle_length, std::int64_t block_length,
                            std::int64_t num_parallel_calls) const {
  return Dataset(
      detail::make_interleave_node(node_, std::move(fn), cycle_length, block_length, num_parallel_calls));
}

std::unique_ptr<Iterator> Dataset::make_iterator() const { return node_->make_iterator(); }
std::unique_ptr<RowBatchIterator> Dataset::make_row_batch_iterator() const {
  return node_->row_batches() ? node_->make_row_batch_iterator() : nullptr;
}
std::int64_t Dataset::cardinality() const { return node_->cardinality(); }

Dataset::RangeIterator::RangeIterator(std::shared_ptr<Iterator> it) : it_(std::move(it)), current_(it_->next()) {}

Dataset::RangeIterator& Dataset::RangeIterator::operator++() {
  current_ = it_->next();
  return *this;
}

Dataset::RangeIterator Dataset::begin() const { return RangeIterator(make_iterator()); }

}  // namespace lockstep::data
