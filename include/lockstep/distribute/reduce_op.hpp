#pragma once
#include "lockstep/tensor/reduce_op.hpp"

namespace lockstep::distribute {

// The tensor layer owns the enum (its multi-tensor reduction is what collectives run).
using ::lockstep::ReduceOp;
using ::lockstep::reduce_op_name;

}  // namespace lockstep::distribute
