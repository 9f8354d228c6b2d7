// Convolution and pooling ops: argument checks, output shapes, the backend descriptors, and
// the tape records (geometry = strides, dilation, padding top/bottom/left/right, groups).
#include <algorithm>
#include <string>
#include <vector>

#include "lockstep/tensor/device_constant.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

std::array<std::int64_t, 2> same_padding(std::int64_t in, std::int64_t window, std::int64_t stride,
                                         std::int64_t dilation) {
  const std::int64_t out = (in + stride - 1) / stride;
  const std::int64_t effective = (window - 1) * dilation + 1;
  const std::int64_t total = std::max<std::int64_t>(0, (out - 1) * stride + effective - in);
  return {total / 2, total - total / 2};
}

std::int64_t window_output_size(std::int64_t in, std::int64_t window, std::int64_t stride, std::int64_t dilation,
                                std::int64_t pad_before, std::int64_t pad_after) {
  const std::int64_t span = in + pad_before + pad_after - ((window - 1) * dilation + 1);
  return span < 0 ? 0 : span / stride + 1;
}

namespace {
std::string pair_str(const std::array<std::int64_t, 2>& p) { return detail::concat("(", p[0], ", ", p[1], ")"); }

// ---- 16-bit tensors on float32 kernels ----
// Pooling kernels are float32 (kernel_ops.def: F32), and so are the CPU's convolutions (CUDA's
// are 16-bit too: cuDNN, and then nothing widens here). A 16-bit tensor (mixed precision) is
// widened to float32 for a float32 kernel (float32 accumulation) and the result rounded back,
// so what the tape keeps stays 16-bit: that is what halves a convnet's activation memory. The
// batch goes through in parts of at most kWidenedPartBytes of float32 per operand, so the
// temporaries stay small next to the activations (widened whole, a two-layer convnet's step held
// as much as in float32), and in at most kMaxWidenedParts parts, which bounds the calls (three
// launches each on a GPU) a large batch costs.
constexpr std::int64_t kWidenedPartBytes = std::int64_t{1} << 16;
constexpr std::int64_t kMaxWidenedParts = 32;

// The dtype a kernel computes t's op in: t's own where the backend has the kernel for it, else
// float32 where it has that; else t's own, so that the missing kernel's error names the dtype asked
// for (the CUDA backend and a CPU without AVX-512 have no fused conv2d_max_pool2d at all).
DType kernel_dtype(const Tensor& t, backend::KernelOp op) {
  const DeviceKind kind = t.device().kind;
  if (backend::supports(kind, t.dtype(), op)) return t.dtype();
  return backend::supports(kind, DType::kF32, op) ? DType::kF32 : t.dtype();
}
// t in dtype d (unrecorded: the op records itself on its own inputs); undefined stays undefined.
Tensor as(const Tensor& t, DType d) { return !t.defined() || t.dtype() == d ? t : t.to(d); }

// An op's kernel run over the batch (n examples of at most `row` elements in its largest
// operand): whole, on the tensors themselves, where the kernel takes `like`'s dtype; else in parts,
// each operand's rows widened (in()) and each output's computed into a float32 part (out())
// that done() rounds into its rows.
class BatchRun {
 public:
  BatchRun(const Tensor& like, backend::KernelOp op, std::int64_t n, std::int64_t row)
      : kd_(kernel_dtype(like, op)), widen_(kd_ != like.dtype()), n_(n),
        rows_(widen_ ? std::max({std::int64_t{1}, kWidenedPartBytes / std::max<std::int64_t>(1, 4 * row),
                                 (n + kMaxWidenedParts - 1) / kMaxWidenedParts})
                     : std::max<std::int64_t>(1, n)) {}
  DType dtype() const { return kd_; }
  /// f(b, e) for each part [b, e) of the batch, in order; once (0, 0) for an empty batch.
  template <typename F>
  void each(F&& f) const {
    std::int64_t b = 0;
    do {
      const std::int64_t e = std::min(n_, b + rows_);
      f(b, e);
      b = e;
    } while (b < n_);
  }
  Tensor in(const Tensor& t, std::int64_t b, std::int64_t e) const {
    return widen_ ? t.slice(b, e).to(DType::kF32) : t.slice(b, e);
  }
  Tensor out(const Tensor& t, std::int64_t b, std::int64_t e) const {
    return widen_ ? Tensor::empty(t.slice(b, e).shape(), DType::kF32) : t.slice(b, e);
  }
  void done(const Tensor& part, const Tensor& t, std::int64_t b, std::int64_t e) const {
    if (!widen_) return;
    Tensor rows = t.slice(b, e);
    kern("conv2d", part, backend::KernelOp::kCast).cast(ctx(), part.raw_data(), t.dtype(), rows.raw_data(), part.numel());
  }

 private:
  DType kd_;
  bool widen_;
  std::int64_t n_, rows_;
};

template <typename Desc>
Desc part_of(Desc d, std::int64_t b, std::int64_t e) {
  d.n = e - b;
  return d;
}
// Adds a part's kernel (or bias) gradient to the sum of the parts before it.
void add_part(Tensor& total, const Tensor& part) { total = total.defined() ? add(total, part) : part; }

void check_padding(const char* op, const Padding2d& p) {
  LOCKSTEP_CHECK(p.top >= 0 && p.bottom >= 0 && p.left >= 0 && p.right >= 0, op,
                 ": padding must not be negative, got top ", p.top, ", bottom ", p.bottom, ", left ", p.left,
                 ", right ", p.right);
}

void check_nhwc(const char* op, const Tensor& x) {
  LOCKSTEP_CHECK(x.rank() == 4, op, ": expected an NHWC input (batch, height, width, channels), got ",
                 x.shape().str());
}

backend::Conv2dDesc conv_desc(const char* op, const Shape& x, const Shape& k, const Conv2dOptions& o) {
  LOCKSTEP_CHECK(x.rank() == 4, op, ": expected an NHWC input (batch, height, width, channels), got ", x.str());
  LOCKSTEP_CHECK(k.rank() == 4, op, ": expected a kernel (height, width, in_channels / groups, out_channels), got ",
                 k.str());
  LOCKSTEP_CHECK(o.strides[0] > 0 && o.strides[1] > 0, op, ": strides must be positive, got ", pair_str(o.strides));
  LOCKSTEP_CHECK(o.dilation[0] > 0 && o.dilation[1] > 0, op, ": dilation must be positive, got ",
                 pair_str(o.dilation));
  check_padding(op, o.padding);
  LOCKSTEP_CHECK(o.groups > 0 && x[3] % o.groups == 0 && k[3] % o.groups == 0, op, ": groups ", o.groups,
                 " must divide the input's ", x[3], " channels and the kernel's ", k[3], " filters");
  LOCKSTEP_CHECK(k[2] * o.groups == x[3] && k[0] > 0 && k[1] > 0 && k[3] > 0, op, ": kernel ", k.str(),
                 " does not match input ", x.str(), " with groups ", o.groups, " (expected (kh, kw, ",
                 x[3] / o.groups, ", filters))");
  backend::Conv2dDesc d;
  d.n = x[0], d.h = x[1], d.w = x[2], d.c = x[3];
  d.kh = k[0], d.kw = k[1], d.oc = k[3];
  d.stride_h = o.strides[0], d.stride_w = o.strides[1];
  d.dilation_h = o.dilation[0], d.dilation_w = o.dilation[1];
  d.pad_top = o.padding.top, d.pad_bottom = o.padding.bottom, d.pad_left = o.padding.left,
  d.pad_right = o.padding.right;
  d.groups = o.groups;
  d.relu = o.activation == FusedActivation::kRelu;
  d.winograd = o.winograd;
  d.oh = window_output_size(d.h, d.kh, d.stride_h, d.dilation_h, d.pad_top, d.pad_bottom);
  d.ow = window_output_size(d.w, d.kw, d.stride_w, d.dilation_w, d.pad_left, d.pad_right);
  LOCKSTEP_CHECK(d.oh > 0 && d.ow > 0, op, ": the ", k[0], "x", k[1], " kernel (dilation ", pair_str(o.dilation),
                 ") is larger than the padded ", d.h, "x", d.w, " input ", x.str());
  // One example's element counts, in and out, fit in 64 bits (Shape::numel refuses an overflow by
  // name, whatever the batch): the ops and kernels multiply them (a hostile file's 2^40 strides).
  (void)Shape{d.h, d.w, d.c}.numel();
  (void)Shape{d.oh, d.ow, d.oc}.numel();
  return d;
}

backend::Pool2dDesc pool_desc(const char* op, const Shape& x, const Pool2dOptions& o, bool max) {
  LOCKSTEP_CHECK(x.rank() == 4, op, ": expected an NHWC input (batch, height, width, channels), got ", x.str());
  LOCKSTEP_CHECK(o.pool_size[0] > 0 && o.pool_size[1] > 0, op, ": pool_size must be positive, got ",
                 pair_str(o.pool_size));
  LOCKSTEP_CHECK(o.strides[0] > 0 && o.strides[1] > 0, op, ": strides must be positive, got ", pair_str(o.strides));
  check_padding(op, o.padding);
  // Every window must hold an element of x (otherwise a max is -inf and an average 0/0).
  LOCKSTEP_CHECK(o.padding.top < o.pool_size[0] && o.padding.bottom < o.pool_size[0] &&
                     o.padding.left < o.pool_size[1] && o.padding.right < o.pool_size[1],
                 op, ": padding must be smaller than the pool size ", pair_str(o.pool_size));
  backend::Pool2dDesc d;
  d.n = x[0], d.h = x[1], d.w = x[2], d.c = x[3];
  d.kh = o.pool_size[0], d.kw = o.pool_size[1];
  d.stride_h = o.strides[0], d.stride_w = o.strides[1];
  d.pad_top = o.padding.top, d.pad_bottom = o.padding.bottom, d.pad_left = o.padding.left,
  d.pad_right = o.padding.right;
  d.max = max;
  d.oh = window_output_size(d.h, d.kh, d.stride_h, 1, d.pad_top, d.pad_bottom);
  d.ow = window_output_size(d.w, d.kw, d.stride_w, 1, d.pad_left, d.pad_right);
  LOCKSTEP_CHECK(d.oh > 0 && d.ow > 0, op, ": the pool window ", pair_str(o.pool_size),
                 " is larger than the padded input ", x.str());
  return d;
}

std::array<std::int64_t, 10> conv_geometry(const Conv2dOptions& o) {
  return {o.strides[0], o.strides[1], o.dilation[0], o.dilation[1], o.padding.top, o.padding.bottom,
          o.padding.left, o.padding.right, o.groups, static_cast<std::int64_t>(o.activation)};
}
std::array<std::int64_t, 10> pool_geometry(const Pool2dOptions& o) {
  return {o.pool_size[0], o.pool_size[1], o.strides[0], o.strides[1], o.padding.top, o.padding.bottom,
          o.padding.left, o.padding.right, 0, 0};
}

Tensor pool_impl(const char* name, bool max, const Tensor& x, const Pool2dOptions& o) {
  detail::check_float(name, {&x});
  check_nhwc(name, x);
  const backend::Pool2dDesc d = pool_desc(name, x.shape(), o, max);
  const BatchRun run(x, backend::KernelOp::kPool2d, d.n, d.h * d.w * d.c);
  const auto& k = kern(name, as(x.slice(0, 0), run.dtype()), backend::KernelOp::kPool2d);
  Tensor y = Tensor::empty({d.n, d.oh, d.ow, d.c}, x.dtype());
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor xp = run.in(x, b, e);
    Tensor yp = run.out(y, b, e);
    k.pool2d(ctx(), part_of(d, b, e), xp.raw_data(), yp.raw_data());
    run.done(yp, y, b, e);
  });
  if (detail::recording({&x})) {
    OpRecord r;
    r.type = max ? OpType::kMaxPool2d : OpType::kAvgPool2d;
    r.inputs = {x, Tensor(), Tensor()};
    r.output = y;
    r.geometry = pool_geometry(o);
    detail::record(r);
  }
  return y;
}

// conv2d's argument checks, shared by the fused conv2d_max_pool2d (`op` names the one called).
backend::Conv2dDesc checked_conv(const char* op, const Tensor& x, const Tensor& kernel, const Tensor& bias,
                                 const Conv2dOptions& o) {
  detail::check_float(op, {&x, &kernel});
  const backend::Conv2dDesc d = conv_desc(op, x.shape(), kernel.shape(), o);
  if (bias.defined()) {
    detail::check_float(op, {&x, &bias});
    LOCKSTEP_CHECK(bias.rank() == 1 && bias.dim(0) == d.oc, op, ": bias ", bias.shape().str(),
                   " does not match the kernel's ", d.oc, " filters");
  }
  return d;
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2dOptions& o) {
  const backend::Conv2dDesc d = checked_conv("conv2d", x, kernel, bias, o);
  const BatchRun run(x, backend::KernelOp::kConv2d, d.n, std::max(d.h * d.w * d.c, d.oh * d.ow * d.oc));
  const Tensor wk = as(kernel, run.dtype()), bk = as(bias, run.dtype());
  const auto& k = kern("conv2d", wk, backend::KernelOp::kConv2d);
  Tensor y = Tensor::empty({d.n, d.oh, d.ow, d.oc}, x.dtype());
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor xp = run.in(x, b, e);
    Tensor yp = run.out(y, b, e);
    k.conv2d(ctx(), part_of(d, b, e), xp.raw_data(), wk.raw_data(), bk.defined() ? bk.raw_data() : nullptr,
             yp.raw_data());
    run.done(yp, y, b, e);
  });
  if (detail::recording({&x, &kernel, &bias})) {
    OpRecord r;
    r.type = OpType::kConv2d;
    r.inputs = {x, kernel, bias};
    r.output = y;
    r.geometry = conv_geometry(o);
    detail::record(r);
  }
  return y;
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) { return pool_impl("max_pool2d", true, x, o); }
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) { return pool_impl("avg_pool2d", false, x, o); }

namespace {
// The descriptors of conv2d_max_pool2d (and of its gradient: `op`), checked as conv2d and
// max_pool2d check theirs.
std::pair<backend::Conv2dDesc, backend::Pool2dDesc> conv_pool_descs(const char* op, const Tensor& x,
                                                                    const Tensor& kernel, const Tensor& bias,
                                                                    const Conv2dOptions& o, const Pool2dOptions& po) {
  const backend::Conv2dDesc d = checked_conv(op, x, kernel, bias, o);
  backend::Pool2dDesc p = pool_desc(op, Shape{d.n, d.oh, d.ow, d.oc}, po, true);
  p.relu_input = d.relu;
  return {d, p};
}

// The shapes the fused kernel takes (backend::conv_max_pool_fusable), or a ValueError naming the rule.
void check_fusable(const char* op, const backend::Conv2dDesc& d, const backend::Pool2dDesc& p) {
  LOCKSTEP_CHECK(backend::conv_max_pool_fusable(d, p), op, ": no fused kernel for a ", d.kh, "x", d.kw,
                 " convolution over ", d.c, " channels (strides (", d.stride_h, ", ", d.stride_w, "), dilation (",
                 d.dilation_h, ", ", d.dilation_w, "), groups ", d.groups, ") pooled by (", p.kh, ", ", p.kw,
                 ") windows (strides (", p.stride_h, ", ", p.stride_w, ")): it takes stride 1, no dilation or groups, "
                 "kernel height * width * channels <= ", backend::kMaxFusedConvTaps,
                 ", and pool windows that tile the output (strides == pool size, no padding); call conv2d and "
                 "max_pool2d (see conv2d_max_pool2d_supported)");
}
}  // namespace

bool conv2d_max_pool2d_supported(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2dOptions& o,
                                 const Pool2dOptions& po) {
  if (!x.defined() || !kernel.defined() || !is_floating(x.dtype()) ||
      !backend::supports(x.device().kind, kernel_dtype(x, backend::KernelOp::kConv2dMaxPool2d),
                         backend::KernelOp::kConv2dMaxPool2d))
    return false;
  try {
    const auto [d, p] = conv_pool_descs("conv2d_max_pool2d", x, kernel, bias, o, po);
    return backend::conv_max_pool_fusable(d, p);
  } catch (const Error&) {
    return false;  // arguments conv2d or max_pool2d reject: they say why
  }
}

Tensor conv2d_max_pool2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2dOptions& o,
                         const Pool2dOptions& po) {
  const auto [d, p] = conv_pool_descs("conv2d_max_pool2d", x, kernel, bias, o, po);
  const BatchRun run(x, backend::KernelOp::kConv2dMaxPool2d, d.n, std::max(d.h * d.w * d.c, p.oh * p.ow * d.oc));
  const Tensor wk = as(kernel, run.dtype()), bk = as(bias, run.dtype());
  const auto& k = kern("conv2d_max_pool2d", wk, backend::KernelOp::kConv2dMaxPool2d);
  check_fusable("conv2d_max_pool2d", d, p);
  Tensor y = Tensor::empty({d.n, p.oh, p.ow, d.oc}, x.dtype());
  Tensor arg = Tensor::empty({d.n, p.oh, p.ow, d.oc}, DType::kU8);
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor xp = run.in(x, b, e);
    Tensor yp = run.out(y, b, e), ap = arg.slice(b, e);
    k.conv2d_max_pool2d(ctx(), part_of(d, b, e), part_of(p, b, e), xp.raw_data(), wk.raw_data(),
                        bk.defined() ? bk.raw_data() : nullptr, yp.raw_data(), static_cast<std::uint8_t*>(ap.raw_data()));
    run.done(yp, y, b, e);
  });
  if (detail::recording({&x, &kernel, &bias})) {
    OpRecord r;
    r.type = OpType::kConv2dMaxPool2d;
    r.inputs = {x, kernel, bias};
    r.output = y;
    r.saved = {arg, Tensor()};
    r.geometry = conv_geometry(o);
    r.i0 = po.pool_size[0];
    r.i1 = po.pool_size[1];
    detail::record(r);
  }
  return y;
}

Tensor zero_pad2d(const Tensor& x, const Padding2d& p) {
  check_nhwc("zero_pad2d", x);
  check_padding("zero_pad2d", p);
  const std::int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), c = x.dim(3);
  const std::int64_t h2 = h + p.top + p.bottom, w2 = w + p.left + p.right;
  // Rows of C channels scattered into a zero tensor: the storage kernels do it for every dtype.
  const std::int64_t top = p.top, left = p.left;
  const Tensor idx =
      device_constant({"zero_pad2d rows: h, w, h2, w2, top, left", {h, w, h2, w2, top, left}}, n,
                      [=](std::int64_t examples) {
                        std::vector<std::int64_t> index(static_cast<std::size_t>(examples * h * w));
                        for (std::int64_t b = 0, i = 0; b < examples; ++b)
                          for (std::int64_t y = 0; y < h; ++y)
                            for (std::int64_t xx = 0; xx < w; ++xx)
                              index[static_cast<std::size_t>(i++)] = (b * h2 + y + top) * w2 + xx + left;
                        return Tensor::from_vector(index, {examples, h * w});
                      })
          .reshape({n * h * w});
  Tensor out = Tensor::zeros({n, h2, w2, c}, x.dtype());
  if (c > 0 && n * h * w > 0) {
    Tensor rows = out.reshape({n * h2 * w2, c});
    scatter_add_rows(rows, idx, x.reshape({n * h * w, c}));
  }
  if (detail::recording({&x})) {
    OpRecord r;
    r.type = OpType::kZeroPad2d;
    r.inputs = {x, Tensor(), Tensor()};
    r.output = out;
    r.saved = {idx, Tensor()};
    detail::record(r);
  }
  return out;
}

Tensor conv2d_transpose(const Tensor& x, const Tensor& kernel, const std::array<std::int64_t, 2>& output_size,
                        const Conv2dOptions& o) {
  detail::check_float("conv2d_transpose", {&x, &kernel});
  check_nhwc("conv2d_transpose", x);
  LOCKSTEP_CHECK(kernel.rank() == 4,
                 "conv2d_transpose: expected a kernel (height, width, filters, in_channels), got ",
                 kernel.shape().str());
  LOCKSTEP_CHECK(o.groups == 1 && o.activation == FusedActivation::kNone,
                 "conv2d_transpose: takes groups 1 and no fused activation, got groups ", o.groups);
  LOCKSTEP_CHECK(kernel.dim(3) == x.dim(3), "conv2d_transpose: kernel ", kernel.shape().str(),
                 " does not match input ", x.shape().str(), " (expected (kh, kw, filters, ", x.dim(3), "))");
  LOCKSTEP_CHECK(output_size[0] > 0 && output_size[1] > 0, "conv2d_transpose: output size ",
                 pair_str(output_size), " must be positive");
  // The convolution whose input gradient this is: from the (N, OH, OW, F) output to x.
  const Shape out{x.dim(0), output_size[0], output_size[1], kernel.dim(2)};
  Conv2dOptions plain = o;
  plain.winograd = false;
  const backend::Conv2dDesc d = conv_desc("conv2d_transpose", out, kernel.shape(), plain);
  LOCKSTEP_CHECK(d.oh == x.dim(1) && d.ow == x.dim(2), "conv2d_transpose: the ", d.kh, "x", d.kw,
                 " convolution (strides ", pair_str(o.strides), ", dilation ", pair_str(o.dilation),
                 ", padding top ", o.padding.top, ", bottom ", o.padding.bottom, ", left ", o.padding.left,
                 ", right ", o.padding.right, ") maps an output of ", out.str(), " to (", d.oh, ", ", d.ow,
                 "), not to the input's ", x.shape().str());
  const Tensor y = conv2d_input_grad(kernel, x, out, plain);
  if (detail::recording({&x, &kernel})) {
    OpRecord r;
    r.type = OpType::kConv2dTranspose;
    r.inputs = {x, kernel, Tensor()};
    r.output = y;
    r.geometry = conv_geometry(plain);
    detail::record(r);
  }
  return y;
}

Tensor conv2d_input_grad(const Tensor& kernel, const Tensor& dy, const Shape& input_shape, const Conv2dOptions& o) {
  detail::check_float("conv2d_input_grad", {&kernel, &dy});
  const backend::Conv2dDesc d = conv_desc("conv2d_input_grad", input_shape, kernel.shape(), o);
  LOCKSTEP_CHECK(dy.shape() == Shape({d.n, d.oh, d.ow, d.oc}), "conv2d_input_grad: dy ", dy.shape().str(),
                 " does not match the output (", d.n, ", ", d.oh, ", ", d.ow, ", ", d.oc, ")");
  const BatchRun run(dy, backend::KernelOp::kConv2dBackwardData, d.n, std::max(d.h * d.w * d.c, d.oh * d.ow * d.oc));
  const Tensor wk = as(kernel, run.dtype());
  const auto& k = kern("conv2d_input_grad", wk, backend::KernelOp::kConv2dBackwardData);
  Tensor dx = Tensor::empty(input_shape, dy.dtype());
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor dyp = run.in(dy, b, e);
    Tensor dxp = run.out(dx, b, e);
    k.conv2d_backward_data(ctx(), part_of(d, b, e), wk.raw_data(), dyp.raw_data(), dxp.raw_data());
    run.done(dxp, dx, b, e);
  });
  return dx;
}

std::array<Tensor, 2> conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Shape& kernel_shape,
                                         bool with_bias, const Conv2dOptions& o) {
  detail::check_float("conv2d_kernel_grad", {&x, &dy});
  const backend::Conv2dDesc d = conv_desc("conv2d_kernel_grad", x.shape(), kernel_shape, o);
  LOCKSTEP_CHECK(dy.shape() == Shape({d.n, d.oh, d.ow, d.oc}), "conv2d_kernel_grad: dy ", dy.shape().str(),
                 " does not match the output (", d.n, ", ", d.oh, ", ", d.ow, ", ", d.oc, ")");
  const BatchRun run(dy, backend::KernelOp::kConv2dBackwardWeights, d.n, std::max(d.h * d.w * d.c, d.oh * d.ow * d.oc));
  const auto& k = kern("conv2d_kernel_grad", as(dy.slice(0, 0), run.dtype()),
                       backend::KernelOp::kConv2dBackwardWeights);
  Tensor dw, db;
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor xp = run.in(x, b, e), dyp = run.in(dy, b, e);
    Tensor dwp = Tensor::empty(kernel_shape, run.dtype());
    Tensor dbp = with_bias ? Tensor::empty({d.oc}, run.dtype()) : Tensor();
    k.conv2d_backward_weights(ctx(), part_of(d, b, e), xp.raw_data(), dyp.raw_data(), dwp.raw_data(),
                              with_bias ? dbp.raw_data() : nullptr);
    add_part(dw, dwp);
    if (with_bias) add_part(db, dbp);
  });
  return {as(dw, dy.dtype()), as(db, dy.dtype())};
}

Tensor pool2d_grad(bool max, const Tensor& x, const Tensor& y, const Tensor& dy, const Pool2dOptions& o,
                   bool relu_input) {
  detail::check_float("pool2d_grad", {&x, &y, &dy});
  backend::Pool2dDesc d = pool_desc("pool2d_grad", x.shape(), o, max);
  d.relu_input = max && relu_input;
  const Shape out{d.n, d.oh, d.ow, d.c};
  LOCKSTEP_CHECK(y.shape() == out && dy.shape() == out, "pool2d_grad: y ", y.shape().str(), " and dy ",
                 dy.shape().str(), " do not match the output ", out.str());
  const BatchRun run(dy, backend::KernelOp::kPool2dBackward, d.n, d.h * d.w * d.c);
  const auto& k = kern("pool2d_grad", as(dy.slice(0, 0), run.dtype()), backend::KernelOp::kPool2dBackward);
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor xp = run.in(x, b, e), yp = run.in(y, b, e), dyp = run.in(dy, b, e);
    Tensor dxp = run.out(dx, b, e);
    k.pool2d_backward(ctx(), part_of(d, b, e), xp.raw_data(), yp.raw_data(), dyp.raw_data(), dxp.raw_data());
    run.done(dxp, dx, b, e);
  });
  return dx;
}

std::array<Tensor, 3> conv2d_max_pool2d_grad(const Tensor& x, const Tensor& kernel, bool with_bias, const Tensor& y,
                                            const Tensor& arg, const Tensor& dy, const Conv2dOptions& o,
                                            const std::array<std::int64_t, 2>& pool_size, const std::array<bool, 3>& needs) {
  detail::check_float("conv2d_max_pool2d_grad", {&x, &y, &dy});  // the kernel: with x, below
  const auto [d, p] = conv_pool_descs("conv2d_max_pool2d_grad", x, kernel, Tensor(), o,
                                      {.pool_size = pool_size, .strides = pool_size});
  const Shape out{d.n, p.oh, p.ow, d.oc};
  check_fusable("conv2d_max_pool2d_grad", d, p);
  LOCKSTEP_CHECK(y.shape() == out && dy.shape() == out && arg.shape() == out && arg.dtype() == DType::kU8,
                 "conv2d_max_pool2d_grad: y ", y.shape().str(), ", arg ", arg.shape().str(), " and dy ", dy.shape().str(),
                 " do not match the output ", out.str());
  const BatchRun run(dy, backend::KernelOp::kConv2dMaxPool2dBackwardWeights, d.n,
                     std::max(d.h * d.w * d.c, d.oh * d.ow * d.oc));
  const Tensor wk = as(kernel, run.dtype());
  const bool weights = needs[1] || (with_bias && needs[2]);
  const auto& kw = kern("conv2d_max_pool2d_grad", wk, backend::KernelOp::kConv2dMaxPool2dBackwardWeights);
  const auto& ku = kern("conv2d_max_pool2d_grad", wk, backend::KernelOp::kMaxUnpool2d);
  Conv2dOptions plain = o;
  plain.activation = FusedActivation::kNone;
  std::array<Tensor, 3> g;
  const bool widened = run.dtype() != x.dtype();
  if (needs[0] && widened) g[0] = Tensor::empty(x.shape(), x.dtype());
  run.each([&](std::int64_t b, std::int64_t e) {
    const Tensor xp = run.in(x, b, e), yp = run.in(y, b, e), dyp = run.in(dy, b, e);
    const auto* a = static_cast<const std::uint8_t*>(arg.slice(b, e).raw_data());
    const backend::Conv2dDesc dp = part_of(d, b, e);
    const backend::Pool2dDesc pp = part_of(p, b, e);
    if (weights) {
      Tensor dwp = Tensor::empty(kernel.shape(), run.dtype());
      Tensor dbp = with_bias ? Tensor::empty({d.oc}, run.dtype()) : Tensor();
      kw.conv2d_max_pool2d_backward_weights(ctx(), dp, pp, xp.raw_data(), yp.raw_data(), a, dyp.raw_data(),
                                            dwp.raw_data(), with_bias ? dbp.raw_data() : nullptr);
      add_part(g[1], dwp);
      if (with_bias) add_part(g[2], dbp);
    }
    if (needs[0]) {
      // The convolution's output gradient, then the convolution's own input gradient.
      Tensor dconv = Tensor::empty({e - b, d.oh, d.ow, d.oc}, run.dtype());
      ku.max_unpool2d(ctx(), pp, yp.raw_data(), a, dyp.raw_data(), dconv.raw_data());
      const Tensor dxp = conv2d_input_grad(wk, dconv, xp.shape(), plain);
      if (widened) run.done(dxp, g[0], b, e);
      else g[0] = dxp;  // one part: the whole gradient
    }
  });
  g[1] = as(g[1], dy.dtype());
  g[2] = as(g[2], dy.dtype());
  return g;
}

}  // namespace lockstep
