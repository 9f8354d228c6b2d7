// Convolution and pooling ops: argument checks, output shapes, the backend descriptors, and
// the tape records (geometry = strides, dilation, padding top/bottom/left/right, groups).
#include <string>
#include <vector>

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
  const auto& k = kern(name, x, backend::KernelOp::kPool2d);
  Tensor y = Tensor::empty({d.n, d.oh, d.ow, d.c}, x.dtype());
  k.pool2d(ctx(), d, x.raw_data(), y.raw_data());
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
  const auto& k = kern("conv2d", x, backend::KernelOp::kConv2d);
  Tensor y = Tensor::empty({d.n, d.oh, d.ow, d.oc}, x.dtype());
  k.conv2d(ctx(), d, x.raw_data(), kernel.raw_data(), bias.defined() ? bias.raw_data() : nullptr, y.raw_data());
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
      !backend::supports(x.device().kind, x.dtype(), backend::KernelOp::kConv2dMaxPool2d))
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
  const auto& k = kern("conv2d_max_pool2d", x, backend::KernelOp::kConv2dMaxPool2d);
  check_fusable("conv2d_max_pool2d", d, p);
  Tensor y = Tensor::empty({d.n, p.oh, p.ow, d.oc}, x.dtype());
  Tensor arg = Tensor::empty({d.n, p.oh, p.ow, d.oc}, DType::kU8);
  k.conv2d_max_pool2d(ctx(), d, p, x.raw_data(), kernel.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
                      y.raw_data(), static_cast<std::uint8_t*>(arg.raw_data()));
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
  std::vector<std::int64_t> index(static_cast<std::size_t>(n * h * w));
  for (std::int64_t b = 0, i = 0; b < n; ++b)
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t xx = 0; xx < w; ++xx) index[static_cast<std::size_t>(i++)] = (b * h2 + y + p.top) * w2 + xx + p.left;
  const Tensor idx = Tensor::from_vector(index, {n * h * w});
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

Tensor conv2d_input_grad(const Tensor& kernel, const Tensor& dy, const Shape& input_shape, const Conv2dOptions& o) {
  detail::check_float("conv2d_input_grad", {&kernel, &dy});
  const backend::Conv2dDesc d = conv_desc("conv2d_input_grad", input_shape, kernel.shape(), o);
  LOCKSTEP_CHECK(dy.shape() == Shape({d.n, d.oh, d.ow, d.oc}), "conv2d_input_grad: dy ", dy.shape().str(),
                 " does not match the output (", d.n, ", ", d.oh, ", ", d.ow, ", ", d.oc, ")");
  const auto& k = kern("conv2d_input_grad", dy, backend::KernelOp::kConv2dBackwardData);
  Tensor dx = Tensor::empty(input_shape, dy.dtype());
  k.conv2d_backward_data(ctx(), d, kernel.raw_data(), dy.raw_data(), dx.raw_data());
  return dx;
}

std::array<Tensor, 2> conv2d_kernel_grad(const Tensor& x, const Tensor& dy, const Shape& kernel_shape,
                                         bool with_bias, const Conv2dOptions& o) {
  detail::check_float("conv2d_kernel_grad", {&x, &dy});
  const backend::Conv2dDesc d = conv_desc("conv2d_kernel_grad", x.shape(), kernel_shape, o);
  LOCKSTEP_CHECK(dy.shape() == Shape({d.n, d.oh, d.ow, d.oc}), "conv2d_kernel_grad: dy ", dy.shape().str(),
                 " does not match the output (", d.n, ", ", d.oh, ", ", d.ow, ", ", d.oc, ")");
  const auto& k = kern("conv2d_kernel_grad", dy, backend::KernelOp::kConv2dBackwardWeights);
  Tensor dw = Tensor::empty(kernel_shape, dy.dtype());
  Tensor db = with_bias ? Tensor::empty({d.oc}, dy.dtype()) : Tensor();
  k.conv2d_backward_weights(ctx(), d, x.raw_data(), dy.raw_data(), dw.raw_data(),
                            with_bias ? db.raw_data() : nullptr);
  return {dw, db};
}

Tensor pool2d_grad(bool max, const Tensor& x, const Tensor& y, const Tensor& dy, const Pool2dOptions& o,
                   bool relu_input) {
  detail::check_float("pool2d_grad", {&x, &y, &dy});
  backend::Pool2dDesc d = pool_desc("pool2d_grad", x.shape(), o, max);
  d.relu_input = max && relu_input;
  const Shape out{d.n, d.oh, d.ow, d.c};
  LOCKSTEP_CHECK(y.shape() == out && dy.shape() == out, "pool2d_grad: y ", y.shape().str(), " and dy ",
                 dy.shape().str(), " do not match the output ", out.str());
  const auto& k = kern("pool2d_grad", dy, backend::KernelOp::kPool2dBackward);
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  k.pool2d_backward(ctx(), d, x.raw_data(), y.raw_data(), dy.raw_data(), dx.raw_data());
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
  std::array<Tensor, 3> g;
  if (needs[1] || (with_bias && needs[2])) {
    const auto& k = kern("conv2d_max_pool2d_grad", dy, backend::KernelOp::kConv2dMaxPool2dBackwardWeights);
    g[1] = Tensor::empty(kernel.shape(), dy.dtype());
    if (with_bias) g[2] = Tensor::empty({d.oc}, dy.dtype());
    k.conv2d_max_pool2d_backward_weights(ctx(), d, p, x.raw_data(), y.raw_data(),
                                         static_cast<const std::uint8_t*>(arg.raw_data()), dy.raw_data(),
                                         g[1].raw_data(), with_bias ? g[2].raw_data() : nullptr);
  }
  if (needs[0]) {
    // The convolution's output gradient, then the convolution's own input gradient.
    const auto& k = kern("conv2d_max_pool2d_grad", dy, backend::KernelOp::kMaxUnpool2d);
    Tensor dconv = Tensor::empty({d.n, d.oh, d.ow, d.oc}, dy.dtype());
    k.max_unpool2d(ctx(), p, y.raw_data(), static_cast<const std::uint8_t*>(arg.raw_data()), dy.raw_data(),
                   dconv.raw_data());
    Conv2dOptions plain = o;
    plain.activation = FusedActivation::kNone;
    g[0] = conv2d_input_grad(kernel, dconv, x.shape(), plain);
  }
  return g;
}

}  // namespace lockstep
