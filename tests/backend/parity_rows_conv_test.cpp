// Parity rows: conv2d (strides, dilation, padding, groups, depthwise) with its input and
// kernel gradients, max / average pooling and their gradients, and the fused convolution +
// max pooling with its gradients, against naive double loops, in float32 and the 16-bit floats.
#include <cmath>
#include <limits>

#include "backend/parity.hpp"
#include "lockstep/autograd/gradient_tape.hpp"

namespace lockstep::parity {

namespace {
using backend::KernelOp;
// The CPU's kernels are float32's; the ops widen 16-bit tensors for them and round the results back
// (ops_conv.cpp), so every dtype runs on the float32 kernel and meets its own dtype's tolerance.
// CUDA has 16-bit conv2d kernels (cuDNN, float32 accumulation): there the same rows run them in
// float16 / bfloat16 and check them against this reference and the CPU's float32 (parity_cuda).
constexpr DType kWidened = DType::kF32;

struct ConvCase {
  const char* variant;
  Shape x, k;  // NHWC input, (kh, kw, c / groups, oc) kernel
  Conv2dOptions o;
  bool bias;
};
// split: 1.5 MFLOP over 7 examples, so the 3-thread parity pool splits the batch unevenly.
const ConvCase kConvCases[] = {
    {"split_bias", {7, 12, 11, 8}, {3, 3, 8, 16}, {}, true},
    {"split_bias_relu", {7, 12, 11, 8}, {3, 3, 8, 16}, {.activation = FusedActivation::kRelu}, true},
    // 3x3, stride 1, channels in 16s, C * OC >= 2048: oneDNN's Winograd where the CPU has it
    // (forward and kernel gradient), the direct kernel elsewhere; both must meet the same tolerance.
    {"winograd_bias_relu", {4, 10, 9, 32}, {3, 3, 32, 64}, {.activation = FusedActivation::kRelu, .winograd = true},
     true},
    {"winograd_padded", {2, 8, 8, 64}, {3, 3, 64, 32}, {.padding = {1, 1, 1, 1}, .winograd = true}, false},
    {"strided_dilated_padded", {3, 9, 10, 4}, {3, 2, 4, 5}, {.strides = {2, 3}, .dilation = {2, 1}, .padding = {2, 2, 0, 1}},
     false},
    {"depthwise", {5, 8, 8, 6}, {3, 3, 1, 12}, {.padding = {1, 1, 1, 1}, .groups = 6}, true},
    {"grouped", {2, 6, 7, 4}, {2, 2, 2, 6}, {.strides = {1, 2}, .groups = 2}, false},
};

struct ConvGeom {
  std::int64_t n, h, w, c, kh, kw, icg, oc, ocg, oh, ow;
};
ConvGeom geom(const ConvCase& c) {
  ConvGeom g{c.x[0], c.x[1], c.x[2], c.x[3], c.k[0], c.k[1], c.k[2], c.k[3], c.k[3] / c.o.groups, 0, 0};
  g.oh = window_output_size(g.h, g.kh, c.o.strides[0], c.o.dilation[0], c.o.padding.top, c.o.padding.bottom);
  g.ow = window_output_size(g.w, g.kw, c.o.strides[1], c.o.dilation[1], c.o.padding.left, c.o.padding.right);
  return g;
}

// Calls f(y index, x index, kernel index) for every term of the convolution.
template <typename F>
void for_each_term(const ConvCase& c, F&& f) {
  const ConvGeom g = geom(c);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t oy = 0; oy < g.oh; ++oy)
      for (std::int64_t ox = 0; ox < g.ow; ++ox)
        for (std::int64_t o = 0; o < g.oc; ++o) {
          const std::int64_t yi = ((n * g.oh + oy) * g.ow + ox) * g.oc + o, grp = o / g.ocg;
          for (std::int64_t ky = 0; ky < g.kh; ++ky) {
            const std::int64_t iy = oy * c.o.strides[0] - c.o.padding.top + ky * c.o.dilation[0];
            if (iy < 0 || iy >= g.h) continue;
            for (std::int64_t kx = 0; kx < g.kw; ++kx) {
              const std::int64_t ix = ox * c.o.strides[1] - c.o.padding.left + kx * c.o.dilation[1];
              if (ix < 0 || ix >= g.w) continue;
              for (std::int64_t ci = 0; ci < g.icg; ++ci)
                f(yi, ((n * g.h + iy) * g.w + ix) * g.c + grp * g.icg + ci, ((ky * g.kw + kx) * g.icg + ci) * g.oc + o);
            }
          }
        }
}

// Sums of terms with the sum of their magnitudes, then the Expected.
struct Sums {
  std::vector<double> s, acc;
  explicit Sums(std::int64_t n) : s(static_cast<std::size_t>(n)), acc(static_cast<std::size_t>(n)) {}
  void add(std::int64_t i, double t) {
    s[static_cast<std::size_t>(i)] += t;
    acc[static_cast<std::size_t>(i)] += std::fabs(t);
  }
  Expected to(const Shape& shape) const {
    Expected e(shape);
    for (std::int64_t i = 0; i < shape.numel(); ++i) e.set(i, s[static_cast<std::size_t>(i)], acc[static_cast<std::size_t>(i)]);
    return e;
  }
};

Row conv_forward_row(const ConvCase& c) {
  const ConvGeom g = geom(c);
  std::vector<InputSpec> inputs{{c.x, uniform(-1, 1), {}}, {c.k, uniform(-1, 1), {}}};
  if (c.bias) inputs.push_back({{g.oc}, uniform(-1, 1), {}});
  return make_row(
      c.bias ? "conv2d_bias" : "conv2d", c.variant, "conv2d", floats(), {{KernelOp::kConv2d, kWidened}}, inputs,
      [c](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.o)};
      },
      [c, g](const std::vector<Host>& in, DType) {
        const Shape ys{g.n, g.oh, g.ow, g.oc};
        Sums s(ys.numel());
        for_each_term(c, [&](std::int64_t yi, std::int64_t xi, std::int64_t ki) { s.add(yi, in[0][xi] * in[1][ki]); });
        if (c.bias)
          for (std::int64_t i = 0; i < ys.numel(); ++i) s.add(i, in[2][i % g.oc]);
        if (c.o.activation == FusedActivation::kRelu)
          for (double& v : s.s) v = std::max(v, 0.0);
        return std::vector<Expected>{s.to(ys)};
      });
}

Row conv_input_grad_row(const ConvCase& c) {
  const ConvGeom g = geom(c);
  return make_row(
      "conv2d_input_grad", c.variant, "conv2d_input_grad", floats(), {{KernelOp::kConv2dBackwardData, kWidened}},
      {{c.k, uniform(-1, 1), {}}, {{g.n, g.oh, g.ow, g.oc}, uniform(-1, 1), {}}},
      [c](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{conv2d_input_grad(in[0], in[1], c.x, c.o)};
      },
      [c](const std::vector<Host>& in, DType) {
        Sums s(c.x.numel());
        for_each_term(c, [&](std::int64_t yi, std::int64_t xi, std::int64_t ki) { s.add(xi, in[1][yi] * in[0][ki]); });
        return std::vector<Expected>{s.to(c.x)};
      });
}

Row conv_kernel_grad_row(const ConvCase& c) {
  const ConvGeom g = geom(c);
  return make_row(
      c.bias ? "conv2d_kernel_grad_bias" : "conv2d_kernel_grad", c.variant, "conv2d_kernel_grad", floats(),
      {{KernelOp::kConv2dBackwardWeights, kWidened}},
      {{c.x, uniform(-1, 1), {}}, {{g.n, g.oh, g.ow, g.oc}, uniform(-1, 1), {}}},
      [c](const std::vector<Tensor>& in, DType) {
        auto [dw, db] = conv2d_kernel_grad(in[0], in[1], c.k, c.bias, c.o);
        return c.bias ? std::vector<Tensor>{dw, db} : std::vector<Tensor>{dw};
      },
      [c, g](const std::vector<Host>& in, DType) {
        Sums s(c.k.numel()), b(g.oc);
        for_each_term(c, [&](std::int64_t yi, std::int64_t xi, std::int64_t ki) { s.add(ki, in[0][xi] * in[1][yi]); });
        std::vector<Expected> out{s.to(c.k)};
        if (c.bias) {
          for (std::int64_t i = 0; i < in[1].numel(); ++i) b.add(i % g.oc, in[1][i]);
          out.push_back(b.to({g.oc}));
        }
        return out;
      });
}

struct PoolCase {
  const char* variant;
  Shape x;
  Pool2dOptions o;
  bool ties = false;  // a few values only (parity's coarse()), as after a ReLU: max pooling's
                      // gradient must go to each window's first maximum
  bool nan = false;   // NaN at every 7th element: a max pooling window holding one is NaN
};
// split: 2.3M window reads over 9 examples (the pool splits the batch).
const PoolCase kPoolCases[] = {
    {"valid", {3, 9, 8, 5}, {}},
    {"valid_odd", {2, 7, 9, 16}, {}},  // a last row and column no window covers
    {"same_overlapping", {4, 7, 7, 5}, {.pool_size = {3, 3}, .strides = {2, 2}, .padding = {1, 1, 1, 1}}},
    {"split", {9, 32, 32, 32}, {.pool_size = {3, 3}, .strides = {1, 1}}},
    {"ties", {3, 6, 6, 19}, {}, true},
    {"ties_overlapping", {2, 7, 7, 12}, {.pool_size = {3, 3}, .strides = {2, 2}, .padding = {1, 1, 1, 1}}, true},
};

struct PoolGeom {
  std::int64_t n, h, w, c, oh, ow;
};
PoolGeom geom(const PoolCase& p) {
  return {p.x[0], p.x[1], p.x[2], p.x[3],
          window_output_size(p.x[1], p.o.pool_size[0], p.o.strides[0], 1, p.o.padding.top, p.o.padding.bottom),
          window_output_size(p.x[2], p.o.pool_size[1], p.o.strides[1], 1, p.o.padding.left, p.o.padding.right)};
}

// f(y index, indices of x inside the window, in row-major window order).
template <typename F>
void for_each_window(const PoolCase& p, F&& f) {
  const PoolGeom g = geom(p);
  std::vector<std::int64_t> idx;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t oy = 0; oy < g.oh; ++oy)
      for (std::int64_t ox = 0; ox < g.ow; ++ox)
        for (std::int64_t ch = 0; ch < g.c; ++ch) {
          idx.clear();
          for (std::int64_t ky = 0; ky < p.o.pool_size[0]; ++ky)
            for (std::int64_t kx = 0; kx < p.o.pool_size[1]; ++kx) {
              const std::int64_t iy = oy * p.o.strides[0] - p.o.padding.top + ky;
              const std::int64_t ix = ox * p.o.strides[1] - p.o.padding.left + kx;
              if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) idx.push_back(((n * g.h + iy) * g.w + ix) * g.c + ch);
            }
          f(((n * g.oh + oy) * g.ow + ox) * g.c + ch, idx);
        }
}

Row pool_row(const PoolCase& p, bool max) {
  const PoolGeom g = geom(p);
  const Shape ys{g.n, g.oh, g.ow, g.c};
  return make_row(
      max ? "max_pool2d" : "avg_pool2d", p.variant, max ? "max_pool2d" : "avg_pool2d", floats(),
      {{KernelOp::kPool2d, kWidened}}, {{p.x, p.nan ? with_nan(-2, 2, 7) : p.ties ? coarse() : uniform(-2, 2), {}}},
      [p, max](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{max ? max_pool2d(in[0], p.o) : avg_pool2d(in[0], p.o)};
      },
      [p, max, ys](const std::vector<Host>& in, DType) {
        Expected e(ys);
        for_each_window(p, [&](std::int64_t yi, const std::vector<std::int64_t>& idx) {
          double m = -std::numeric_limits<double>::infinity(), s = 0, acc = 0;
          for (std::int64_t i : idx) {
            m = std::isnan(in[0][i]) || in[0][i] > m ? in[0][i] : m;  // a NaN wins and stays
            s += in[0][i], acc += std::fabs(in[0][i]);
          }
          if (max) e.set(yi, m);
          else e.set(yi, s / static_cast<double>(idx.size()), acc / static_cast<double>(idx.size()));
        });
        return std::vector<Expected>{e};
      });
}

// The gradient row's inputs are x and dy; y is computed by the forward op (on the row's dtype).
// relu_input (max only): x is taken for a ReLU's output, so windows whose maximum is not
// positive hand out nothing (what the ReLU's mask would leave of their gradient).
Row pool_grad_row(const PoolCase& p, bool max, bool relu_input = false) {
  const PoolGeom g = geom(p);
  const Shape ys{g.n, g.oh, g.ow, g.c};
  return make_row(
      // The forward op runs first, so it is what a dtype error names.
      max ? (relu_input ? "max_pool2d_grad_relu_input" : "max_pool2d_grad") : "avg_pool2d_grad", p.variant,
      max ? "max_pool2d" : "avg_pool2d", floats(), {{KernelOp::kPool2d, kWidened}, {KernelOp::kPool2dBackward, kWidened}},
      {{p.x, p.nan ? with_nan(-2, 2, 7) : p.ties ? coarse() : uniform(-2, 2), {}}, {ys, uniform(-1, 1), {}}},
      [p, max, relu_input](const std::vector<Tensor>& in, DType) {
        const Tensor y = max ? max_pool2d(in[0], p.o) : avg_pool2d(in[0], p.o);
        return std::vector<Tensor>{pool2d_grad(max, in[0], y, in[1], p.o, relu_input)};
      },
      [p, max, relu_input](const std::vector<Host>& in, DType) {
        Sums s(p.x.numel());
        for_each_window(p, [&](std::int64_t yi, const std::vector<std::int64_t>& idx) {
          if (max) {
            // The first maximum, or the first NaN (which the maximum is): the element that gave it.
            std::int64_t best = idx[0];
            for (std::int64_t i : idx)
              if (!std::isnan(in[0][best]) && (std::isnan(in[0][i]) || in[0][i] > in[0][best])) best = i;
            if (!relu_input || in[0][best] > 0) s.add(best, in[1][yi]);
          } else {
            for (std::int64_t i : idx) s.add(i, in[1][yi] / static_cast<double>(idx.size()));
          }
        });
        return std::vector<Expected>{s.to(p.x)};
      });
}
// conv2d_max_pool2d: a convolution the fused kernel takes, then max pooling by windows that
// tile its output.
struct ConvPoolCase {
  ConvCase conv;
  std::array<std::int64_t, 2> pool;
  bool ties = false;  // x and kernel from a few values whose sums are exact in float32: equal
                      // window elements are common, and the first of them must win
};
// batch: 2.7 MFLOP over 7 examples, so the 3-thread parity pool splits the batch unevenly.
const ConvPoolCase kConvPoolCases[] = {
    {{"batch_relu", {7, 28, 28, 1}, {3, 3, 1, 32}, {.activation = FusedActivation::kRelu}, true}, {2, 2}},
    // "same" padding, 3 channels, 20 filters (a partial block of 16), an odd output (a last row
    // no window covers), no bias.
    {{"same_rgb_partial", {3, 9, 11, 3}, {3, 3, 3, 20}, {.padding = {1, 1, 1, 1}}, false}, {2, 2}},
    {{"wide_window", {2, 10, 9, 2}, {2, 4, 2, 17}, {.padding = {0, 1, 2, 1}, .activation = FusedActivation::kRelu}, true},
     {3, 2}},
    // 9 taps: two blocks of 16 filters a pass, the second partial (20) or absent (8).
    {{"pair_partial", {2, 7, 8, 1}, {3, 3, 1, 20}, {}, true}, {2, 2}},
    {{"pair_absent", {2, 6, 6, 1}, {2, 2, 1, 8}, {.activation = FusedActivation::kRelu}, false}, {2, 2}},
    {{"ties_relu", {3, 8, 8, 1}, {3, 3, 1, 24}, {.activation = FusedActivation::kRelu}, true}, {2, 2}, true},
    {{"ties_wide", {2, 8, 8, 2}, {3, 3, 2, 16}, {}, true}, {2, 2}, true},
};

Pool2dOptions pool_options_of(const ConvPoolCase& c) { return {.pool_size = c.pool, .strides = c.pool}; }

// Halves and units: with parity's coarse() inputs every product and sum is exact in float32.
Gen units() {
  return [](std::mt19937_64& r, DType, std::int64_t) -> double {
    constexpr double kValues[] = {-1.0, -0.5, 0.0, 0.5, 1.0};
    return kValues[r() % 5];
  };
}

// The convolution in double, then per window (row-major) its first maximum: calls
// f(y index, winning conv index, max) for every pooling window, with `conv`/`acc` the conv's
// values and sums of magnitudes.
struct ConvPoolRef {
  std::vector<double> conv, acc;
  ConvPoolRef(const ConvPoolCase& c, const std::vector<Host>& in) {
    const ConvGeom g = geom(c.conv);
    const std::int64_t n = g.n * g.oh * g.ow * g.oc;
    conv.assign(static_cast<std::size_t>(n), 0.0);
    acc.assign(static_cast<std::size_t>(n), 0.0);
    for_each_term(c.conv, [&](std::int64_t yi, std::int64_t xi, std::int64_t ki) {
      conv[static_cast<std::size_t>(yi)] += in[0][xi] * in[1][ki];
      acc[static_cast<std::size_t>(yi)] += std::fabs(in[0][xi] * in[1][ki]);
    });
    if (c.conv.bias)
      for (std::int64_t i = 0; i < n; ++i) {
        conv[static_cast<std::size_t>(i)] += in[2][i % g.oc];
        acc[static_cast<std::size_t>(i)] += std::fabs(in[2][i % g.oc]);
      }
  }
  template <typename F>
  void for_each_window(const ConvPoolCase& c, F&& f) const {
    const ConvGeom g = geom(c.conv);
    const std::int64_t ph = g.oh / c.pool[0], pw = g.ow / c.pool[1];
    for (std::int64_t n = 0; n < g.n; ++n)
      for (std::int64_t py = 0; py < ph; ++py)
        for (std::int64_t px = 0; px < pw; ++px)
          for (std::int64_t o = 0; o < g.oc; ++o) {
            std::int64_t best = -1;
            for (std::int64_t wy = 0; wy < c.pool[0]; ++wy)
              for (std::int64_t wx = 0; wx < c.pool[1]; ++wx) {
                const std::int64_t i = ((n * g.oh + py * c.pool[0] + wy) * g.ow + px * c.pool[1] + wx) * g.oc + o;
                if (best < 0 || conv[static_cast<std::size_t>(i)] > conv[static_cast<std::size_t>(best)]) best = i;
              }
            f(((n * ph + py) * pw + px) * g.oc + o, best, conv[static_cast<std::size_t>(best)]);
          }
  }
};

std::vector<InputSpec> conv_pool_inputs(const ConvPoolCase& c) {
  const Gen x = c.ties ? coarse() : uniform(-1, 1), k = c.ties ? units() : uniform(-1, 1);
  std::vector<InputSpec> inputs{{c.conv.x, x, {}}, {c.conv.k, k, {}}};
  if (c.conv.bias) inputs.push_back({{c.conv.k[3]}, c.ties ? units() : uniform(-1, 1), {}});
  return inputs;
}

Shape pooled_shape(const ConvPoolCase& c) {
  const ConvGeom g = geom(c.conv);
  return {g.n, g.oh / c.pool[0], g.ow / c.pool[1], g.oc};
}

Row conv_pool_row(const ConvPoolCase& c) {
  const bool relu = c.conv.o.activation == FusedActivation::kRelu;
  return make_row(
      "conv2d_max_pool2d", c.conv.variant, "conv2d_max_pool2d", floats(), {{KernelOp::kConv2dMaxPool2d, kWidened}},
      conv_pool_inputs(c),
      [c](const std::vector<Tensor>& in, DType) {
        return std::vector<Tensor>{
            conv2d_max_pool2d(in[0], in[1], c.conv.bias ? in[2] : Tensor(), c.conv.o, pool_options_of(c))};
      },
      [c, relu](const std::vector<Host>& in, DType) {
        const ConvPoolRef ref(c, in);
        Expected e(pooled_shape(c));
        ref.for_each_window(c, [&](std::int64_t yi, std::int64_t best, double m) {
          e.set(yi, relu ? std::max(m, 0.0) : m, ref.acc[static_cast<std::size_t>(best)]);
        });
        return std::vector<Expected>{e};
      });
}

// The gradients by a GradientTape (dx through the convolution's own input gradient), of
// sum(y * dy) for a given dy.
Row conv_pool_grad_row(const ConvPoolCase& c) {
  const bool relu = c.conv.o.activation == FusedActivation::kRelu;
  std::vector<InputSpec> inputs = conv_pool_inputs(c);
  inputs.push_back({pooled_shape(c), c.ties ? units() : uniform(-1, 1), {}});
  return make_row(
      "conv2d_max_pool2d_grad", c.conv.variant, "conv2d_max_pool2d", floats(),
      {{KernelOp::kConv2dMaxPool2d, kWidened},
       {KernelOp::kConv2dMaxPool2dBackwardWeights, kWidened},
       {KernelOp::kMaxUnpool2d, kWidened},
       {KernelOp::kConv2dBackwardData, kWidened}},
      inputs,
      [c](const std::vector<Tensor>& in, DType) {
        const Tensor bias = c.conv.bias ? in[2] : Tensor();
        GradientTape tape;
        std::vector<Tensor> sources{in[0], in[1]};
        if (c.conv.bias) sources.push_back(bias);
        for (const Tensor& t : sources) tape.watch(t);
        const Tensor y = conv2d_max_pool2d(in[0], in[1], bias, c.conv.o, pool_options_of(c));
        // Summed in float32: the tape seeds a target's gradient with float32 ones.
        return tape.gradient(sum(cast(mul(y, in.back()), DType::kF32)), sources);
      },
      [c, relu](const std::vector<Host>& in, DType) {
        const ConvPoolRef ref(c, in);
        const ConvGeom g = geom(c.conv);
        const Host& dy = in.back();
        std::vector<double> dconv(ref.conv.size(), 0.0);
        ref.for_each_window(c, [&](std::int64_t yi, std::int64_t best, double m) {
          if (!relu || m > 0) dconv[static_cast<std::size_t>(best)] = dy[yi];
        });
        Sums dx(c.conv.x.numel()), dk(c.conv.k.numel()), db(g.oc);
        for_each_term(c.conv, [&](std::int64_t yi, std::int64_t xi, std::int64_t ki) {
          dx.add(xi, dconv[static_cast<std::size_t>(yi)] * in[1][ki]);
          dk.add(ki, dconv[static_cast<std::size_t>(yi)] * in[0][xi]);
        });
        std::vector<Expected> out{dx.to(c.conv.x), dk.to(c.conv.k)};
        if (c.conv.bias) {
          for (std::size_t i = 0; i < dconv.size(); ++i) db.add(static_cast<std::int64_t>(i) % g.oc, dconv[i]);
          out.push_back(db.to({g.oc}));
        }
        return out;
      });
}
}  // namespace

std::vector<Row> conv_pool_rows() {
  std::vector<Row> rows;
  for (const ConvCase& c : kConvCases) {
    rows.push_back(conv_forward_row(c));
    rows.push_back(conv_input_grad_row(c));
    rows.push_back(conv_kernel_grad_row(c));
  }
  for (const PoolCase& p : kPoolCases) {
    for (bool max : {true, false}) {
      rows.push_back(pool_row(p, max));
      rows.push_back(pool_grad_row(p, max));
    }
    rows.push_back(pool_grad_row(p, true, true));
  }
  // Windows holding a NaN (overlapping, so some hold two): NaN, on every backend (oneDNN's
  // pooling skipped it); max pooling's gradient goes to the window's first NaN (it went nowhere).
  // nan_2x2: Keras' default pool, 19 channels (the vector loops and their scalar tail).
  const PoolCase nan_overlapping{
      "nan", {2, 7, 7, 5}, {.pool_size = {3, 3}, .strides = {2, 2}, .padding = {1, 1, 1, 1}}, false, true};
  const PoolCase nan_2x2{"nan_2x2", {2, 6, 8, 19}, {}, false, true};
  for (bool max : {true, false}) rows.push_back(pool_row(nan_overlapping, max));
  for (const PoolCase& p : {nan_overlapping, nan_2x2}) {
    rows.push_back(pool_grad_row(p, true));
    rows.push_back(pool_grad_row(p, true, true));
  }
  for (const ConvPoolCase& c : kConvPoolCases) {
    rows.push_back(conv_pool_row(c));
    rows.push_back(conv_pool_grad_row(c));
  }
  return rows;
}

}  // namespace lockstep::parity
