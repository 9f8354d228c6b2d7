#pragma once
// Factories of the built-in dataset nodes, one source file each; Dataset's methods call them.
#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/data/dataset_node.hpp"

namespace lockstep::data::detail {

using NodePtr = std::shared_ptr<const DatasetNode>;

NodePtr make_tensor_slices_node(std::vector<Tensor> components);
NodePtr make_shuffle_node(NodePtr input, std::int64_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration);
NodePtr make_batch_node(NodePtr input, std::int64_t batch_size, bool drop_remainder);
NodePtr make_repeat_node(NodePtr input, std::int64_t count);
NodePtr make_take_node(NodePtr input, std::int64_t count);

}  // namespace lockstep::data::detail
