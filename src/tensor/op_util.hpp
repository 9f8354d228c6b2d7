#pragma once
// Shared helpers for the op implementations.
#include <initializer_list>

#include "backend/kernels.hpp"
#include "lockstep/tensor/op_record.hpp"
#include "lockstep/tensor/ops.hpp"

namespace lockstep::detail {

inline backend::ComputeContext& ctx() { return backend::current_context(); }
/// The kernel table for t's device and dtype, after checking that it has `k`: a missing
/// kernel is a ValueError naming the op, the dtype and the device.
const backend::KernelTable& kern(const char* op, const Tensor& t, backend::KernelOp k);

/// Throws ValueError unless t lives on a device of the current context's kind: a kernel runs
/// on the current context (its stream, its allocator for the outputs), so a GPU tensor read
/// with a CPU context current (outside strategy.run) is an error naming both, never a crash.
void check_context_kind(const char* op, const Tensor& t);
/// Throws unless every tensor is defined, floating (float32, float16 or bfloat16), of one
/// dtype, and on the device of the current compute context's kind.
void check_float(const char* op, std::initializer_list<const Tensor*> ts);
/// Where the kernel of `op` (kernel k) reads dropout's step: the count of key.step_block (checked:
/// a step block on x's device), or null for the host value key.step. A call that drops (rate > 0)
/// with a host step tells a watching capture check (a replay would freeze the step).
const std::int64_t* dropout_step_at(const char* op, backend::KernelOp k, const DropoutKey& key, float rate,
                                    const Tensor& x);
/// Throws unless t is defined and of an integer dtype (labels, indices).
void check_integer(const char* op, const Tensor& t, const char* what);
/// Integer labels each checked to be in [0, classes): at once on the host where their bytes are
/// there (the CPU's, or a device copy that kept the host's), else on the device into its error
/// mark (backend/error_marks.hpp), raised by raise_marked_errors at the host's next read; the
/// kernels that take them skip an index outside meanwhile.
void check_labels(const char* op, const Tensor& labels, std::int64_t classes);
/// check_labels, then the labels as int64 (cast when needed).
Tensor checked_labels(const char* op, const Tensor& labels, std::int64_t classes);
/// Labels [begin, end) of 1-D int64 labels in host memory checked as check_labels checks host
/// bytes (an error's index counts from the first label): a chunk of a gather that threads share.
void check_label_range(const char* op, const Tensor& labels, std::int64_t begin, std::int64_t end,
                       std::int64_t classes);
/// After the host waited for a device (a copy to the host): raises the ValueError a device's check
/// marked ("<op>: label V at index I is outside [0, C)", as checked_labels' own), clearing its mark:
/// of the marks the read depends on (backend/error_marks.hpp: a replica's own inside a step).
void raise_marked_errors();
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
