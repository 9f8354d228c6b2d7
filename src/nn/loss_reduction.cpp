// Keras 3's apply_mask and reduce_weighted_values (reduction.hpp).
#include <limits>

#include "lockstep/losses/reduction.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::losses {
namespace {

// (B, P): the examples of values of shape `of` and the positions of each.
Shape rows_of(const Shape& of) {
  const std::int64_t b = of.rank() ? of[0] : 1;
  return Shape{b, b ? of.numel() / b : 1};
}

// The mask as float32 (B, P), checked against the values it marks.
Tensor float_mask(const Tensor& mask, const Shape& of, const std::string& what) {
  LOCKSTEP_CHECK(mask.rank() >= 1 && of.rank() >= 1 && mask.dim(0) == of[0] && mask.numel() == of.numel(),
                 "the output's mask ", mask.shape().str(), " does not mark the positions of ", what, " ", of.str(),
                 " (Keras applies an output's mask to a loss per position: a sequence output (batch, steps, ...) "
                 "whose steps the mask marks)");
  return cast(mask, DType::kF32).reshape(rows_of(of));
}

// The sample weights as float32: (1, 1) for a scalar, (B, 1) for one per example, (B, P) for one
// per position of values of shape `of`.
Tensor float_weights(const Tensor& weight, const Shape& of, const std::string& what) {
  if (weight.rank() == 0) return cast(weight, DType::kF32).reshape(Shape{1, 1});
  const Shape rows = rows_of(of);
  const std::int64_t b = rows[0], p = rows[1];
  const bool per_example = one_weight_per_example(weight);
  LOCKSTEP_CHECK(weight.dim(0) == b && (per_example || (p > 1 && weight.numel() == b * p)), "sample_weight: a batch of ",
                 b, " examples needs one weight per example (shape (", b, ",) or (", b, ", 1))",
                 p > 1 ? " or one per position of " + what + " " + of.str() + " (shape (" + std::to_string(b) + ", " +
                             std::to_string(p) + "))"
                       : std::string(),
                 ", got shape ", weight.shape().str());
  return cast(weight, DType::kF32).reshape(per_example ? Shape{b, 1} : rows);
}

}  // namespace

Reduction reduction_from_name(const std::string& name) {
  if (name == "sum_over_batch_size" || name == "auto" || name == "mean") return Reduction::kSumOverBatchSize;
  if (name == "sum") return Reduction::kSum;
  if (name == "none") return Reduction::kNone;
  throw ValueError("a loss's reduction must be one of \"sum_over_batch_size\", \"sum\" or \"none\", got \"" + name +
                   "\"");
}

bool one_weight_per_example(const Tensor& w) { return w.rank() == 1 || (w.rank() == 2 && w.dim(1) == 1); }

Tensor apply_mask(const Tensor& sample_weight, const Tensor& mask, const Shape& of, Reduction reduction,
                  const std::string& what) {
  Tensor w;
  if (mask.defined()) {
    w = float_mask(mask, of, what);
    if (reduction == Reduction::kSumOverBatchSize) {
      // A kept position weighs total / kept: the mean over every position is then the mean over
      // the kept ones. None kept: the mask's zeros make every weight 0.
      const Tensor kept = clip(sum(w), 1.0f, std::numeric_limits<float>::max());
      w = div(scale(w, static_cast<float>(w.numel())), kept);
    }
  }
  if (sample_weight.defined()) {
    const Tensor given = float_weights(sample_weight, of, what);
    w = w.defined() ? mul(given, w) : given;
  }
  return w;
}

Tensor reduce_weighted_values(const Tensor& values, const Tensor& sample_weight, const Tensor& mask,
                              Reduction reduction) {
  const Tensor w = apply_mask(sample_weight, mask, values.shape(), reduction);
  const Tensor weighted =
      w.defined() ? reshape(mul(reshape(values, rows_of(values.shape())), cast(w, values.dtype())), values.shape())
                  : values;
  if (reduction == Reduction::kNone) return weighted;
  if (reduction == Reduction::kSum || weighted.numel() == 0) return sum(weighted);
  return mean(weighted);
}

}  // namespace lockstep::losses
