#include "lockstep/tensor/op_record.hpp"

#include "tensor/op_util.hpp"

namespace lockstep {

namespace {
thread_local OpRecorder* t_recorder = nullptr;
}

OpRecorder* current_recorder() { return t_recorder; }
OpRecorder* set_current_recorder(OpRecorder* r) {
  OpRecorder* prev = t_recorder;
  t_recorder = r;
  return prev;
}

const char* op_name(OpType t) {
  static const char* names[] = {"add", "sub", "mul", "div", "maximum", "scale", "add_scalar", "pow_scalar",
                                "clip", "neg", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid",
                                "tanh", "gelu", "softmax", "log_softmax", "matmul", "dense", "sum", "mean",
                                "reduce_max", "reshape", "slice", "cast",
                                "sparse_softmax_cross_entropy_with_logits",
                                "softmax_cross_entropy_with_logits", "dropout"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<std::size_t>(OpType::kCount));
  return names[static_cast<std::size_t>(t)];
}

namespace detail {

void check_float(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    LOCKSTEP_CHECK(t->defined(), op, ": an input tensor is undefined");
    LOCKSTEP_CHECK(t->dtype() == DType::kF32, op, ": expected a float32 tensor, got ", dtype_name(t->dtype()),
                   " of shape ", t->shape().str(), " (cast it first)");
  }
}

int normalize_axis(const char* op, int axis, std::size_t rank) {
  const int r = static_cast<int>(rank);
  const int a = axis < 0 ? axis + r : axis;
  LOCKSTEP_CHECK(a >= 0 && a < r, op, ": axis ", axis, " out of range for a tensor of rank ", r);
  return a;
}

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i < r - a.rank() ? 1 : a.dims()[i - (r - a.rank())];
    const std::int64_t db = i < r - b.rank() ? 1 : b.dims()[i - (r - b.rank())];
    LOCKSTEP_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a.str(), " and ", b.str(),
                   " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

}  // namespace detail
}  // namespace lockstep
