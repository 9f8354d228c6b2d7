#include "lockstep/tensor/op_record.hpp"

#include "backend/capture.hpp"
#include "backend/error_marks.hpp"
#include "backend/labels.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/host_copy.hpp"
#include "tensor/host_reads.hpp"
#include "tensor/kernel_launches.hpp"
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
  static const char* names[] = {"add", "sub", "mul", "div", "maximum", "minimum", "scale", "add_scalar", "pow_scalar",
                                "clip", "neg", "exp", "log", "sqrt", "square", "abs", "relu", "sigmoid",
                                "tanh", "gelu", "silu", "gather_rows", "concatenate", "softmax", "log_softmax", "matmul", "batch_matmul", "dense", "sum", "mean",
                                "reduce_max", "reshape", "slice", "cast",
                                "sparse_softmax_cross_entropy_with_logits",
                                "softmax_cross_entropy_with_logits", "dropout", "conv2d", "max_pool2d",
                                "avg_pool2d", "zero_pad2d", "conv2d_max_pool2d", "conv2d_transpose", "where", "custom"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<std::size_t>(OpType::kCount));
  return names[static_cast<std::size_t>(t)];
}

void record_custom(const std::array<Tensor, 3>& inputs, const Tensor& output,
                   std::shared_ptr<const CustomGradient> gradient) {
  LOCKSTEP_CHECK(gradient != nullptr && output.defined(), "record_custom: needs an output and a gradient");
  if (!detail::recording({&inputs[0], &inputs[1], &inputs[2]})) return;
  OpRecord r;
  r.type = OpType::kCustom;
  r.inputs = inputs;
  r.output = output;
  r.custom = std::move(gradient);
  detail::record(r);
}

namespace detail {

void check_context_kind(const char* op, const Tensor& t) {
  const Device& c = ctx().device();
  if (c.kind != t.device().kind) [[unlikely]] {
    throw ValueError(detail::concat(op, ": the tensor is on ", t.device().str(), " but this thread computes on ",
                                    c.str(), "; compute inside strategy.run (or a ComputeScope of its device), or "
                                    "copy it with to(Device)"));
  }
}

const backend::KernelTable& kern(const char* op, const Tensor& t, backend::KernelOp k) {
  const Device d = t.device();
  check_context_kind(op, t);
  if (!backend::supports(d.kind, t.dtype(), k)) [[unlikely]] {
    throw ValueError(detail::concat(op, ": not supported for dtype ", dtype_name(t.dtype()), " on ", d.str(), " (the ",
                                    d.kind == DeviceKind::kCpu ? "cpu" : "cuda", " backend has no ",
                                    backend::kernel_op_name(k), " kernel for it",
                                    backend::backend_available(d.kind) ? "" : "; that backend is not built", ")"));
  }
  note_kernel_host_read(d, k);
  note_kernel_launch(d, k);
  if (StepCaptureCheck* check = current_step_capture_check()) [[unlikely]]
    if (const char* why = backend::kernel_capture_refusal(d.kind, k))
      check->block(detail::concat("the op '", op, "' (kernel ", backend::kernel_op_name(k), ") ", why));
  return backend::kernels(d.kind, t.dtype());
}

void check_float(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    LOCKSTEP_CHECK(t->defined(), op, ": an input tensor is undefined");
    LOCKSTEP_CHECK(is_floating(t->dtype()), op, ": expected a floating tensor (float32, float16 or bfloat16), got ",
                   dtype_name(t->dtype()), " of shape ", t->shape().str(), " (cast it first)");
    if (!first) {
      first = t;
      continue;
    }
    LOCKSTEP_CHECK(t->dtype() == first->dtype(), op, ": inputs have different dtypes, ", dtype_name(first->dtype()),
                   " and ", dtype_name(t->dtype()), " (cast one of them)");
    LOCKSTEP_CHECK(t->device().kind == first->device().kind, op, ": inputs are on different devices, ",
                   first->device().str(), " and ", t->device().str());
  }
}

void check_integer(const char* op, const Tensor& t, const char* what) {
  LOCKSTEP_CHECK(t.defined(), op, ": ", what, " are undefined");
  LOCKSTEP_CHECK(t.dtype() == DType::kI32 || t.dtype() == DType::kI64 || t.dtype() == DType::kU8, op, ": ", what,
                 " must be integers (int32, int64 or uint8), got ", dtype_name(t.dtype()));
}

namespace {
// Labels of an integer dtype (check_integer), read as the kernels read them.
std::int64_t host_label(const void* labels, DType dtype, std::int64_t i) {
  return backend::visit_dtype(dtype, [&](auto label_type) -> std::int64_t {
    using L = typename decltype(label_type)::type;
    if constexpr (std::is_integral_v<L>) return backend::label_index(static_cast<const L*>(labels)[i]);
    else throw InternalError(std::string("host_label: labels of ") + dtype_name(dtype) + " are not integers");
  });
}

[[noreturn]] void throw_outside(const char* op, std::int64_t value, std::int64_t index, std::int64_t classes) {
  throw ValueError(backend::outside_message(op, value, index, classes));
}
}  // namespace

void check_labels(const char* op, const Tensor& labels, std::int64_t classes) {
  check_integer(op, labels, "labels");
  // Labels with host bytes are checked there, at once (the CPU's kernel): the CPU's own, or a
  // device copy's that the input path kept. Labels with none on a device are checked by the
  // device, raised later.
  const bool on_cpu = labels.device().kind == DeviceKind::kCpu;
  std::int64_t inside_below = 0;  // a kept index constant's: checked once for a limit
  const std::shared_ptr<const void> kept = host_copy_of(labels, &inside_below);
  if (!on_cpu && kept) {
    check_context_kind(op, labels);
    // Inside a captured step the check is the replay's to repeat: before each replay, on the
    // labels copied in (StepGraph::refill), the host's check or, for labels with no host bytes,
    // the device's.
    // The check alone: the replay reads the labels it copied in, not an int64 cast of them.
    (void)StepGraph::check_before_replay(labels, [op, classes](const Tensor& in) { check_labels(op, in, classes); });
  }
  if (!on_cpu && !kept) {
    // Checked on the device into the context's error mark, raised at the host's next read
    // (raise_marked_errors), so the host does not wait and a captured step repeats it. None (a
    // replica's empty slice): nothing to check.
    if (labels.numel() > 0)
      kern(op, labels, backend::KernelOp::kMarkOutside)
          .mark_outside(ctx(), labels.raw_data(), labels.numel(), classes, backend::error_site(op),
                        backend::error_mark(ctx()));
  } else if ((!on_cpu || labels.numel() > 0) && (inside_below <= 0 || inside_below > classes)) {
    const void* bytes = on_cpu ? labels.raw_data() : kept.get();
    const auto& k = on_cpu ? kern(op, labels, backend::KernelOp::kFirstOutside)
                           : backend::kernels(DeviceKind::kCpu, labels.dtype());
    const std::int64_t bad = k.first_outside(ctx(), bytes, labels.numel(), classes);
    note_host_copy_scanned(labels, classes, bad < 0);
    if (bad >= 0) throw_outside(op, host_label(bytes, labels.dtype(), bad), bad, classes);
  }
}

void check_label_range(const char* op, const Tensor& labels, std::int64_t begin, std::int64_t end,
                       std::int64_t classes) {
  LOCKSTEP_CHECK(labels.defined() && labels.rank() == 1 && labels.dtype() == DType::kI64 &&
                     labels.device().kind == DeviceKind::kCpu && 0 <= begin && begin <= end && end <= labels.numel(),
                 op, ": labels [", begin, ", ", end, ") must be a range of 1-D int64 labels in host memory");
  const auto* range = static_cast<const std::int64_t*>(labels.raw_data()) + begin;
  const std::int64_t bad =
      kern(op, labels, backend::KernelOp::kFirstOutside).first_outside(ctx(), range, end - begin, classes);
  if (bad >= 0) throw_outside(op, host_label(range, DType::kI64, bad), begin + bad, classes);
}

Tensor checked_labels(const char* op, const Tensor& labels, std::int64_t classes) {
  check_labels(op, labels, classes);
  return labels.to(DType::kI64);
}

void raise_marked_errors() {
  if (const std::optional<backend::TakenMarks> m = backend::take_error_marks(ctx())) {
    const backend::ErrorMark& e = m->first;
    std::string what = backend::outside_message(backend::error_site_name(e.site), e.value, e.index, e.limit);
    if (m->more > 0) what += detail::concat(" (and ", m->more, " more device check(s) found values outside)");
    throw ValueError(what);
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
