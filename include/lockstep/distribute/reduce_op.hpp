#pragma once
#include <string>

namespace lockstep::distribute {

enum class ReduceOp { kSum, kMean, kMax, kMin };

/// "sum", "mean", "max", "min"
const char* reduce_op_name(ReduceOp op);

}  // namespace lockstep::distribute
