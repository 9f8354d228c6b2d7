#pragma once
// Shared helpers for the op implementations.
#include <initializer_list>

#include "backend/kernels.hpp"
#include "lockstep/tensor/op_record.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::detail {

inline backend::ComputeContext& ctx() { return backend::current_context(); }
inline const backend::KernelTable& kern(const Tensor& t) { return backend::kernels(t.device().kind); }

/// Throws unless every tensor is defined and float32.
void check_float(const char* op, std::initializer_list<const Tensor*> ts);
/// Normalises a possibly negative axis against rank, naming the op on error.
int normalize_axis(const char* op, int axis, std::size_t rank);
/// Broadcast result shape of a and b, numpy rules; ValueError naming both shapes otherwise.
Shape broadcast_shape(const char* op, const Shape& a, const Shape& b);

/// True when the recorder on this thread wants an op reading these inputs.
inline bool recording(std::initializer_list<const Tensor*> inputs) {
  OpRecorder* r = current_recorder();
  return r && r->wants(inputs.begin(), static_cast<int>(inputs.size()));
}
inline void record(const OpRecord& rec) { current_recorder()->record(rec); }

}  // namespace lockstep::detail
