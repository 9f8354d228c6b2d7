#pragma once

namespace lockstep {

/// How values from several tensors (or replicas) combine.
enum class ReduceOp { kSum, kMean, kMax, kMin };

/// "sum", "mean", "max", "min"
const char* reduce_op_name(ReduceOp op);

}  // namespace lockstep
