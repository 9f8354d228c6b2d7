// Convolution through oneDNN's convolution primitives (forward, backward data, backward
// weights) on NHWC activations and Keras' HWIO kernels, described to oneDNN by strides so no
// caller reorders anything. The batch is split over the device's pool into fixed parts, one
// single-threaded primitive per part; primitives are cached per thread and shape, so a
// steady-state step creates none. Backward weights sums the parts' partial gradients in part
// order: bit-reproducible for a given pool size.
//
// Backward weights of a 3x3, stride-1 convolution, and its forward in training passes
// (Conv2dOptions::winograd), run oneDNN's Winograd F(4x4, 3x3) where oneDNN has it and it pays
// (winograd_shape): 2.25x fewer multiplies,
// measured 1.5x (forward) and 1.2x (backward weights) faster than the direct kernel on a
// convnet's second layer, reorders to and from its blocked layout included. Its rounding error is
// a few times the direct kernel's (relative RMS ~5e-7 against a float64 sum, direct ~1.5e-7).
// LOCKSTEP_CONV_ALGORITHM=direct turns it off (and the fused conv2d_max_pool2d). Backward data
// stays direct: Winograd measured no faster there.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend/cpu/conv_common.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/onednn.hpp"
#include "core/env.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::backend::cpu {

namespace {
using dnnl::memory;
using Dims = memory::dims;

memory::desc kernel_desc(const Conv2dDesc& d) {
  const std::int64_t g = d.groups, ocg = d.oc / g, icg = d.c / g;
  if (g == 1) return memory::desc({d.oc, d.c, d.kh, d.kw}, kF32, Dims{1, d.oc, d.kw * d.c * d.oc, d.c * d.oc});
  return memory::desc({g, ocg, icg, d.kh, d.kw}, kF32, Dims{ocg, 1, d.oc, d.kw * icg * d.oc, icg * d.oc});
}
memory::desc any_kernel_desc(const Conv2dDesc& d) {
  const std::int64_t g = d.groups;
  if (g == 1) return memory::desc({d.oc, d.c, d.kh, d.kw}, kF32, memory::format_tag::any);
  return memory::desc({g, d.oc / g, d.c / g, d.kh, d.kw}, kF32, memory::format_tag::any);
}

struct Geometry {
  Dims strides, dilates, pad_l, pad_r;
};
Geometry geometry(const Conv2dDesc& d) {
  // oneDNN counts dilation from 0 (no dilation), Keras from 1.
  return {{d.stride_h, d.stride_w}, {d.dilation_h - 1, d.dilation_w - 1}, {d.pad_top, d.pad_left},
          {d.pad_bottom, d.pad_right}};
}

bool winograd_allowed() { return !direct_convolutions_only(); }

// A shape Winograd F(4x4, 3x3) computes faster than the direct kernel, reorders included: channels
// in oneDNN's blocks of 16 (a first layer's one input channel, padded, made it 4x slower), and
// enough of them that the multiplies saved outweigh the two reorders of the activations, whose
// cost grows with C + OC while the saving grows with C * OC. Measured (DESIGN-NOTES): 32 -> 64
// channels gain 1.5x forward; ResNet-20's 16 -> 16 lost end to end. oneDNN decides the rest (ISA,
// sizes).
bool winograd_shape(const Conv2dDesc& d) {
  constexpr std::int64_t kMinChannelProduct = 32 * 64;
  return winograd_allowed() && d.kh == 3 && d.kw == 3 && d.stride_h == 1 && d.stride_w == 1 && d.dilation_h == 1 &&
         d.dilation_w == 1 && d.groups == 1 && d.c % 16 == 0 && d.oc % 16 == 0 && d.c * d.oc >= kMinChannelProduct;
}

// The direct kernel on NHWC, or (winograd) Winograd on layouts oneDNN picks.
dnnl::convolution_forward::primitive_desc forward_pd(const Conv2dDesc& d, bool bias, bool winograd) {
  const Geometry g = geometry(d);
  const auto any = memory::format_tag::any;
  const memory::desc src = winograd ? memory::desc({d.n, d.c, d.h, d.w}, kF32, any) : nhwc(d.n, d.c, d.h, d.w);
  const memory::desc dst = winograd ? memory::desc({d.n, d.oc, d.oh, d.ow}, kF32, any) : nhwc(d.n, d.oc, d.oh, d.ow);
  const memory::desc b = bias ? memory::desc({d.oc}, kF32, memory::format_tag::a) : memory::desc();
  const auto alg = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_training, alg, src, any_kernel_desc(d), b, dst,
                                     g.strides, g.dilates, g.pad_l, g.pad_r);
  return {cd, onednn::engine()};
}

// Winograd's forward primitive for d, or none where oneDNN has no Winograd kernel for it.
// (The kernel gradient asks for it as a hint whatever d.winograd says.)
std::optional<dnnl::convolution_forward::primitive_desc> winograd_forward_pd(const Conv2dDesc& d, bool bias) {
  if (!winograd_shape(d)) return std::nullopt;
  try {
    return forward_pd(d, bias, true);
  } catch (const dnnl::error&) {
    return std::nullopt;  // unimplemented for this shape or ISA: the direct kernel does it
  }
}

// A tensor in lockstep's layout (user: NHWC activations, Keras' HWIO kernels) and in the layout
// a primitive chose for it (chosen), with the reorder between them when the two differ.
struct ReorderedMemory {
  memory user, chosen;
  std::optional<dnnl::reorder> reorder;
  ReorderedMemory(const memory::desc& user_desc, const memory::desc& chosen_desc, bool to_user) {
    user = memory(user_desc, onednn::engine(), DNNL_MEMORY_NONE);
    if (chosen_desc == user_desc) {
      chosen = user;
    } else {
      chosen = memory(chosen_desc, onednn::engine());
      reorder = to_user ? dnnl::reorder(chosen, user) : dnnl::reorder(user, chosen);
    }
  }
  void to_chosen(dnnl::stream& s) {
    if (reorder) reorder->execute(s, user, chosen);
  }
  void to_user(dnnl::stream& s) {
    if (reorder) reorder->execute(s, chosen, user);
  }
};

struct Forward {
  dnnl::convolution_forward prim;
  memory bias;
  ReorderedMemory src, dst, kernel;
  Forward(const Conv2dDesc& d, bool has_bias, const dnnl::convolution_forward::primitive_desc& pd)
      : prim(pd),
        src(nhwc(d.n, d.c, d.h, d.w), pd.src_desc(), false),
        dst(nhwc(d.n, d.oc, d.oh, d.ow), pd.dst_desc(), true),
        kernel(kernel_desc(d), pd.weights_desc(), false) {
    if (has_bias) bias = memory(pd.bias_desc(), onednn::engine(), DNNL_MEMORY_NONE);
  }
};

struct BackwardData {
  dnnl::convolution_backward_data prim;
  memory diff_src, diff_dst;
  ReorderedMemory kernel;
  BackwardData(const Conv2dDesc& d, const dnnl::convolution_backward_data::primitive_desc& pd)
      : prim(pd), kernel(kernel_desc(d), pd.weights_desc(), false) {
    diff_src = memory(pd.diff_src_desc(), onednn::engine(), DNNL_MEMORY_NONE);
    diff_dst = memory(pd.diff_dst_desc(), onednn::engine(), DNNL_MEMORY_NONE);
  }
};

struct BackwardWeights {
  dnnl::convolution_backward_weights prim;
  ReorderedMemory src, diff_dst, kernel;
  BackwardWeights(const Conv2dDesc& d, const dnnl::convolution_backward_weights::primitive_desc& pd)
      : prim(pd),
        src(nhwc(d.n, d.c, d.h, d.w), pd.src_desc(), false),
        diff_dst(nhwc(d.n, d.oc, d.oh, d.ow), pd.diff_dst_desc(), false),
        kernel(kernel_desc(d), pd.diff_weights_desc(), true) {}
};

std::array<std::int64_t, 18> key_of(const Conv2dDesc& d, bool bias) {
  return {d.n, d.h, d.w, d.c, d.oh, d.ow, d.oc, d.kh, d.kw, d.stride_h, d.stride_w, d.dilation_h, d.dilation_w,
          d.pad_top, d.pad_left, d.pad_bottom, d.pad_right,
          (d.groups * 2 + (bias ? 1 : 0)) * 2 + (d.winograd ? 1 : 0)};
}

template <typename Entry, typename Make>
Entry& cached(const Conv2dDesc& d, bool bias, Make&& make) {
  thread_local PrimitiveCache<std::array<std::int64_t, 18>, Entry> cache;
  return cache.get(key_of(d, bias), make);
}

Forward& forward_entry(const Conv2dDesc& desc, bool bias) {
  // Where Winograd does not apply, a training and an inference call share one direct primitive.
  Conv2dDesc d = desc;
  d.winograd = desc.winograd && winograd_shape(d);
  return cached<Forward>(d, bias, [&] {
    auto pd = d.winograd ? winograd_forward_pd(d, bias) : std::nullopt;
    return std::make_unique<Forward>(d, bias, pd ? *pd : forward_pd(d, bias, false));
  });
}

BackwardData& backward_data_entry(const Conv2dDesc& d) {
  return cached<BackwardData>(d, false, [&] {
    const Geometry g = geometry(d);
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, nhwc(d.n, d.c, d.h, d.w),
                                             any_kernel_desc(d), nhwc(d.n, d.oc, d.oh, d.ow), g.strides, g.dilates,
                                             g.pad_l, g.pad_r);
    return std::make_unique<BackwardData>(
        d, dnnl::convolution_backward_data::primitive_desc(bd, onednn::engine(), forward_pd(d, false, false)));
  });
}

// Without the bias: bias_gradient computes it.
BackwardWeights& backward_weights_entry(const Conv2dDesc& d) {
  return cached<BackwardWeights>(d, false, [&] {
    const Geometry g = geometry(d);
    if (auto hint = winograd_forward_pd(d, false)) {
      try {
        dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_winograd, hint->src_desc(),
                                                    any_kernel_desc(d), hint->dst_desc(), g.strides, g.dilates,
                                                    g.pad_l, g.pad_r);
        return std::make_unique<BackwardWeights>(
            d, dnnl::convolution_backward_weights::primitive_desc(bd, onednn::engine(), *hint));
      } catch (const dnnl::error&) {
        // no Winograd backward weights for this shape: the direct kernel does it
      }
    }
    dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, nhwc(d.n, d.c, d.h, d.w),
                                                any_kernel_desc(d), nhwc(d.n, d.oc, d.oh, d.ow), g.strides,
                                                g.dilates, g.pad_l, g.pad_r);
    return std::make_unique<BackwardWeights>(
        d, dnnl::convolution_backward_weights::primitive_desc(bd, onednn::engine(), forward_pd(d, false, false)));
  });
}

double conv_flops(const Conv2dDesc& d) {
  return 2.0 * static_cast<double>(d.n * d.oh * d.ow * d.oc) * static_cast<double>(d.kh * d.kw * (d.c / d.groups));
}

// The bias gradient: dy's column sums over a part's rows. Not left to oneDNN's backward
// weights, whose NHWC bias reduction is scalar-compiled code accumulating in memory (a third
// of the first convnet layer's backward). Blocks of rows are summed first, then the blocks,
// which also keeps the float32 rounding error of a long sum small; the order is fixed.
void bias_gradient(const float* dy, std::int64_t rows, std::int64_t oc, float* db) {
  constexpr std::int64_t kBlock = 128;
  thread_local std::vector<float> t_block;
  t_block.resize(static_cast<std::size_t>(oc));
  float* __restrict block = t_block.data();
  float* __restrict out = db;
  std::fill_n(out, oc, 0.0f);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const std::int64_t r1 = std::min(rows, r0 + kBlock);
    std::fill_n(block, oc, 0.0f);
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* __restrict row = dy + r * oc;
      for (std::int64_t c = 0; c < oc; ++c) block[c] += row[c];
    }
    for (std::int64_t c = 0; c < oc; ++c) out[c] += block[c];
  }
}

Conv2dDesc part_of(const Conv2dDesc& d, std::int64_t rows) {
  Conv2dDesc p = d;
  p.n = rows;
  return p;
}
}  // namespace

bool direct_convolutions_only() {
  static const bool direct = [] {
    return env::text("LOCKSTEP_CONV_ALGORITHM") == "direct";
  }();
  return direct;
}

// The op list's conv2d rows are Floating (CUDA's cuDNN kernels); the CPU defines float32's
// (tables.cpp: built_as), so these templates are instantiated for float alone.
template <typename T>
void conv2d(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* w, const void* bias, void* y) {
  static_assert(std::is_same_v<T, float>, "the CPU's convolutions are float32's");
  const BatchParts parts(ctx, d.n, conv_flops(d));
  const auto* xs = static_cast<const float*>(x);
  auto* ys = static_cast<float*>(y);
  parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
    guarded("conv2d", [&] {
      Forward& f = forward_entry(part_of(d, n1 - n0), bias != nullptr);
      f.src.user.set_data_handle(const_cast<float*>(xs + n0 * d.h * d.w * d.c));
      f.dst.user.set_data_handle(ys + n0 * d.oh * d.ow * d.oc);
      f.kernel.user.set_data_handle(const_cast<void*>(w));
      dnnl::stream& s = onednn::stream();
      f.kernel.to_chosen(s);
      f.src.to_chosen(s);
      std::unordered_map<int, memory> args{
          {DNNL_ARG_SRC, f.src.chosen}, {DNNL_ARG_WEIGHTS, f.kernel.chosen}, {DNNL_ARG_DST, f.dst.chosen}};
      if (bias) {
        f.bias.set_data_handle(const_cast<void*>(bias));
        args[DNNL_ARG_BIAS] = f.bias;
      }
      f.prim.execute(s, args);
      f.dst.to_user(s);
      s.wait();
      // The ReLU here, on the part's output while it is in cache, not as oneDNN's eltwise_relu
      // post-op: that one is a max with 0 (vmaxps) and gives 0 for a NaN, which every other path
      // keeps (kernels.hpp's relu_of; CUDA's bias_activation after cuDNN).
      if (d.relu) {
        float* yp = ys + n0 * d.oh * d.ow * d.oc;
        for (std::int64_t i = 0, n = (n1 - n0) * d.oh * d.ow * d.oc; i < n; ++i) yp[i] = relu_of(yp[i]);
      }
    });
  });
}

template <typename T>
void conv2d_backward_data(ComputeContext& ctx, const Conv2dDesc& d, const void* w, const void* dy, void* dx) {
  static_assert(std::is_same_v<T, float>, "the CPU's convolutions are float32's");
  const BatchParts parts(ctx, d.n, conv_flops(d));
  const auto* dys = static_cast<const float*>(dy);
  auto* dxs = static_cast<float*>(dx);
  parts.run(ctx, [&](std::int64_t, std::int64_t n0, std::int64_t n1) {
    guarded("conv2d_backward_data", [&] {
      BackwardData& b = backward_data_entry(part_of(d, n1 - n0));
      b.diff_dst.set_data_handle(const_cast<float*>(dys + n0 * d.oh * d.ow * d.oc));
      b.diff_src.set_data_handle(dxs + n0 * d.h * d.w * d.c);
      b.kernel.user.set_data_handle(const_cast<void*>(w));
      dnnl::stream& s = onednn::stream();
      b.kernel.to_chosen(s);
      b.prim.execute(s, {{DNNL_ARG_DIFF_DST, b.diff_dst}, {DNNL_ARG_WEIGHTS, b.kernel.chosen},
                         {DNNL_ARG_DIFF_SRC, b.diff_src}});
      s.wait();
    });
  });
}

template <typename T>
void conv2d_backward_weights(ComputeContext& ctx, const Conv2dDesc& d, const void* x, const void* dy, void* dw,
                             void* db) {
  static_assert(std::is_same_v<T, float>, "the CPU's convolutions are float32's");
  const BatchParts parts(ctx, d.n, conv_flops(d));
  const std::int64_t wn = d.kh * d.kw * (d.c / d.groups) * d.oc, bn = db ? d.oc : 0;
  if (d.n == 0) {
    std::fill_n(static_cast<float*>(dw), wn, 0.0f);
    if (db) std::fill_n(static_cast<float*>(db), bn, 0.0f);
    return;
  }
  const PartSums sums(parts, wn, bn, dw, db);
  const auto* xs = static_cast<const float*>(x);
  const auto* dys = static_cast<const float*>(dy);
  parts.run(ctx, [&](std::int64_t p, std::int64_t n0, std::int64_t n1) {
    guarded("conv2d_backward_weights", [&] {
      BackwardWeights& b = backward_weights_entry(part_of(d, n1 - n0));
      b.src.user.set_data_handle(const_cast<float*>(xs + n0 * d.h * d.w * d.c));
      b.diff_dst.user.set_data_handle(const_cast<float*>(dys + n0 * d.oh * d.ow * d.oc));
      b.kernel.user.set_data_handle(sums.weights(p));
      dnnl::stream& s = onednn::stream();
      b.src.to_chosen(s);
      b.diff_dst.to_chosen(s);
      b.prim.execute(s, {{DNNL_ARG_SRC, b.src.chosen},
                         {DNNL_ARG_DIFF_DST, b.diff_dst.chosen},
                         {DNNL_ARG_DIFF_WEIGHTS, b.kernel.chosen}});
      if (db) bias_gradient(dys + n0 * d.oh * d.ow * d.oc, (n1 - n0) * d.oh * d.ow, d.oc, sums.bias(p));
      b.kernel.to_user(s);
      s.wait();
    });
  });
  sums.finish();
}

LOCKSTEP_INSTANTIATE_KERNEL_AS(conv2d, float)
LOCKSTEP_INSTANTIATE_KERNEL_AS(conv2d_backward_data, float)
LOCKSTEP_INSTANTIATE_KERNEL_AS(conv2d_backward_weights, float)

}  // namespace lockstep::backend::cpu
