#pragma once
// The order in which the CPU backend combines N inputs, in one place: combine (the collectives'
// reductions) and the optimizers' summed updates (GradientShard::parts) both accumulate a block
// with it, so a sum read in place has the collective's bits.
#include <cstdint>

#include "lockstep/core/reduce_op.hpp"

namespace lockstep::backend::cpu {

template <ReduceOp Op, typename A>
inline A combine2(A a, A b) {
  if constexpr (Op == ReduceOp::kMax) return a > b ? a : b;
  else if constexpr (Op == ReduceOp::kMin) return a < b ? a : b;
  else return a + b;
}

/// acc[i] = ((in[0][s+i] op in[1][s+i]) op in[2][s+i]) ..., i < len, in input order, each value
/// read through load() (to the accumulator type A); kMean's division is the caller's.
template <ReduceOp Op, typename A, typename T, typename Load>
inline void combine_block(const T* const* in, int n_in, std::int64_t s, std::int64_t len, A* acc, Load load) {
  const T* b0 = in[0] + s;
  int rest = 1;  // the first input not yet combined
  if (n_in >= 2) {
    // The first two inputs in one pass: a separate copy into acc costs 25% of a 2-replica
    // all-reduce.
    const T* b1 = in[1] + s;
    for (std::int64_t i = 0; i < len; ++i) acc[i] = combine2<Op>(load(b0[i]), load(b1[i]));
    rest = 2;
  } else {
    for (std::int64_t i = 0; i < len; ++i) acc[i] = load(b0[i]);
  }
  for (int j = rest; j < n_in; ++j) {
    const T* bj = in[j] + s;
    for (std::int64_t i = 0; i < len; ++i) acc[i] = combine2<Op>(acc[i], load(bj[i]));
  }
}

}  // namespace lockstep::backend::cpu
