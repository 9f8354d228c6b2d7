#pragma once
// ReduceOp lives in core (backends combine with it too); the tensor layer's ops take it.
#include "lockstep/core/reduce_op.hpp"
