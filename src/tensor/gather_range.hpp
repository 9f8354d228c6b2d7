#pragma once
// A gather's rows in chunks that threads share, with no tensor made per chunk.
#include <cstdint>
#include <optional>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::detail {

/// Rows [begin, end) of gather_rows_into(dst, src, indices), or of gather_rows_scaled_into(dst,
/// src, indices, *scale) with a scale: src's rows indices[r] written into dst's rows r, the same
/// bits and checks (dst for all of indices; the range's indices), with no slice of dst or of
/// indices made (RowBatch::gather_ahead's chunks: a slice is two heap allocations). indices:
/// 1-D int64 in host memory.
void gather_rows_range_into(Tensor& dst, const Tensor& src, const Tensor& indices, std::int64_t begin,
                            std::int64_t end, std::optional<float> scale);

}  // namespace lockstep::detail
