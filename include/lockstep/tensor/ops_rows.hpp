#pragma once
// A block of consecutive rows as a view, recorded, and the in-place add its gradient goes by: a
// recurrent layer reads step t of a time-major [steps * batch, ...] tensor as rows
// [t * batch, (t + 1) * batch), with no copy forward and, backward, no zero-filled tensor of the
// input's size per step (GradientTape copies or adds each slice's gradient into the input's
// gradient in place, as it adds a gather's).
#include <cstdint>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// Rows [begin, end) of x along dimension 0: a view of x's memory (Tensor::slice), recorded (the
/// gradient is the output's at those rows, zeros elsewhere). ValueError for a range outside x.
Tensor slice_rows(const Tensor& x, std::int64_t begin, std::int64_t end);
/// dst's rows [begin, begin + src.dim(0)) += src, in place (src: those rows' shape, dst's dtype and
/// device, floating). Not recorded. ValueError naming the shapes otherwise.
void add_rows_into(Tensor& dst, std::int64_t begin, const Tensor& src);

}  // namespace lockstep
