#pragma once
// Factories of the built-in dataset nodes, one source file per family; Dataset's methods call them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/data/dataset.hpp"

namespace lockstep::data::detail {

using NodePtr = std::shared_ptr<const DatasetNode>;

NodePtr make_tensor_slices_node(std::vector<Tensor> components);
NodePtr make_shuffle_node(NodePtr input, std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration);
NodePtr make_batch_node(NodePtr input, std::int64_t batch_size, bool drop_remainder);
NodePtr make_repeat_node(NodePtr input, std::int64_t count);
NodePtr make_take_node(NodePtr input, std::int64_t count);

// sources.cpp
NodePtr make_generator_node(std::function<Generator()> make_generator, std::int64_t cardinality);
NodePtr make_range_node(std::int64_t start, std::int64_t stop, std::int64_t step);
// combine.cpp
NodePtr make_zip_node(std::vector<NodePtr> inputs);
NodePtr make_concatenate_node(NodePtr first, NodePtr second);
// select.cpp
NodePtr make_filter_node(NodePtr input, Predicate pred);
NodePtr make_skip_node(NodePtr input, std::int64_t count);
NodePtr make_shard_node(NodePtr input, std::int64_t num_shards, std::int64_t index);
// reshape.cpp
NodePtr make_unbatch_node(NodePtr input);
NodePtr make_enumerate_node(NodePtr input, std::int64_t start);
// cast_and_scale.cpp
NodePtr make_cast_and_scale_node(NodePtr input, std::size_t component, float scale);
// map.cpp
NodePtr make_map_node(NodePtr input, MapFn fn, std::int64_t num_parallel_calls, bool deterministic);
// cache.cpp
NodePtr make_memory_cache_node(NodePtr input);
NodePtr make_file_cache_node(NodePtr input, std::string path);
// prefetch.cpp
NodePtr make_prefetch_node(NodePtr input, std::int64_t buffer_size);
// interleave.cpp
NodePtr make_interleave_node(NodePtr input, InterleaveFn fn, std::int64_t cycle_length, std::int64_t block_length,
                             std::int64_t num_parallel_calls);

}  // namespace lockstep::data::detail
