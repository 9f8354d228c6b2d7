#pragma once
// One piece of a packed vector written in place, with no view made for it: fit packs each
// replica's numbers of an execution into one vector (Model::merge_numbers) at every execution.
#include <cstdint>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::detail {

/// Copies src's values (dst's dtype; any device) into elements [at, at + src.numel()) of dst's
/// flattened view, in place, as Tensor::copy_from copies.
void write_at(Tensor& dst, std::int64_t at, const Tensor& src);

}  // namespace lockstep::detail
