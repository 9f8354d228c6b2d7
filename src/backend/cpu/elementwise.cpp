// Elementwise kernels: unary ops and their gradients, broadcasting binary ops and comparisons.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/vec_math.hpp"

namespace lockstep::backend::cpu {

namespace {
// gelu: p0 != 0 is the tanh approximation (Keras' approximate=True), else the exact erf form;
// a vector at a time (vec_math.hpp), where erff and expf one element a call were a quarter of
// the character GPT's step.
constexpr float kSqrt2OverPi = 0.7978845608028654f, kInvSqrt2 = 0.70710678118654752f;
inline vec::Vec gelu_v(vec::Vec x, float approximate) {
  if (approximate != 0.0f)
    return 0.5f * x * (1.0f + vec::tanh_abs_accurate(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  return 0.5f * x * (1.0f + vec::erf(x * kInvSqrt2));
}
inline vec::Vec gelu_grad_v(vec::Vec x, float approximate) {
  if (approximate != 0.0f) {
    const vec::Vec t = vec::tanh_abs_accurate(kSqrt2OverPi * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 0.134145f * x * x);
  }
  const vec::Vec cdf = 0.5f * (1.0f + vec::erf(x * kInvSqrt2));
  const vec::Vec pdf = 0.3989422804014327f * vec::exp(-0.5f * x * x);
  return cdf + x * pdf;
}

// y = fn(x) on [b, e) through an array function of floats (activations.hpp), 16-bit values
// widened in blocks.
template <typename F>
void map_floats(const F* x, F* y, std::int64_t b, std::int64_t e, void (*fn)(const float*, float*, std::int64_t)) {
  if constexpr (std::is_same_v<F, float>) {
    fn(x + b, y + b, e - b);
  } else {
    constexpr std::int64_t kBlock = 256;
    float in[kBlock], out[kBlock];
    for (std::int64_t i = b; i < e; i += kBlock) {
      const std::int64_t len = std::min(kBlock, e - i);
      for (std::int64_t k = 0; k < len; ++k) in[k] = Elem<F>::load(x[i + k]);
      fn(in, out, len);
      for (std::int64_t k = 0; k < len; ++k) y[i + k] = Elem<F>::store(out[k]);
    }
  }
}

// map_floats' two-input form: z = fn(x, y) over [b, e).
template <typename F>
void map_floats2(const F* x, const F* y, F* z, std::int64_t b, std::int64_t e,
                 void (*fn)(const float*, const float*, float*, std::int64_t)) {
  if constexpr (std::is_same_v<F, float>) {
    fn(x + b, y + b, z + b, e - b);
  } else {
    constexpr std::int64_t kBlock = 256;
    float in0[kBlock], in1[kBlock], out[kBlock];
    for (std::int64_t i = b; i < e; i += kBlock) {
      const std::int64_t len = std::min(kBlock, e - i);
      for (std::int64_t k = 0; k < len; ++k) {
        in0[k] = Elem<F>::load(x[i + k]);
        in1[k] = Elem<F>::load(y[i + k]);
      }
      fn(in0, in1, out, len);
      for (std::int64_t k = 0; k < len; ++k) z[i + k] = Elem<F>::store(out[k]);
    }
  }
}

template <typename F, typename Fn>
void map1(const F* x, F* y, std::int64_t b, std::int64_t e, Fn fn) {
  for (auto i = b; i < e; ++i) y[i] = Elem<F>::store(fn(Elem<F>::load(x[i])));
}

// out[i] = fn(a[i], b[i]) on vectors (fn: (Vec, Vec) -> Vec; a unary one ignores b), the last
// partial vector padded with zeros: an element's bits do not depend on where a range ends.
template <typename F, typename Fn>
void map_vec(const F* a, const F* b, F* out, std::int64_t begin, std::int64_t end, Fn fn) {
  using E = Elem<F>;
  constexpr int kL = vec::kLanes;
  std::int64_t i = begin;
  if constexpr (std::is_same_v<F, float>)
    for (; i + kL <= end; i += kL) vec::store(out + i, fn(vec::load(a + i), vec::load(b + i)));
  for (; i < end; i += kL) {
    const int len = static_cast<int>(std::min<std::int64_t>(kL, end - i));
    float av[kL] = {}, bv[kL] = {};
    for (int k = 0; k < len; ++k) {
      av[k] = E::load(a[i + k]);
      bv[k] = E::load(b[i + k]);
    }
    vec::store(av, fn(vec::load(av), vec::load(bv)));
    for (int k = 0; k < len; ++k) out[i + k] = E::store(av[k]);
  }
}
}  // namespace

template <typename F>
void unary(ComputeContext& ctx, UnaryOp op, const void* xv, void* yv, std::int64_t n, float p0, float p1) {
  const F* x = static_cast<const F*>(xv);
  F* y = static_cast<F*>(yv);
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    switch (op) {
      case UnaryOp::kNeg: map1(x, y, b, e, [](float v) { return -v; }); break;
      case UnaryOp::kExp: map1(x, y, b, e, [](float v) { return std::exp(v); }); break;
      case UnaryOp::kLog: map1(x, y, b, e, [](float v) { return std::log(v); }); break;
      case UnaryOp::kSqrt: map1(x, y, b, e, [](float v) { return std::sqrt(v); }); break;
      case UnaryOp::kSquare: map1(x, y, b, e, [](float v) { return v * v; }); break;
      case UnaryOp::kAbs: map1(x, y, b, e, [](float v) { return std::fabs(v); }); break;
      case UnaryOp::kRelu: map1(x, y, b, e, [](float v) { return relu_of(v); }); break;
      case UnaryOp::kSigmoid: map_floats(x, y, b, e, sigmoid_floats); break;
      case UnaryOp::kTanh: map_floats(x, y, b, e, tanh_floats); break;
      case UnaryOp::kGelu: map_vec(x, x, y, b, e, [p0](vec::Vec v, vec::Vec) { return gelu_v(v, p0); }); break;
      case UnaryOp::kScale: map1(x, y, b, e, [p0](float v) { return v * p0; }); break;
      case UnaryOp::kAddScalar: map1(x, y, b, e, [p0](float v) { return v + p0; }); break;
      case UnaryOp::kPowScalar: map1(x, y, b, e, [p0](float v) { return std::pow(v, p0); }); break;
      case UnaryOp::kClip: map1(x, y, b, e, [p0, p1](float v) { return std::min(std::max(v, p0), p1); }); break;
      case UnaryOp::kSilu: map_floats(x, y, b, e, silu_floats); break;
    }
  });
}

template <typename F>
void unary_backward(ComputeContext& ctx, UnaryOp op, const void* xv, const void* yv, const void* dyv, void* dxv,
                    std::int64_t n, float p0, float p1) {
  const F* x = static_cast<const F*>(xv);
  const F* y = static_cast<const F*>(yv);
  const F* dy = static_cast<const F*>(dyv);
  F* dx = static_cast<F*>(dxv);
  using E = Elem<F>;
  // fn(x, y, dy) -> dx.
  auto map = [&](std::int64_t b, std::int64_t e, auto fn) {
    for (auto i = b; i < e; ++i) dx[i] = E::store(fn(E::load(x[i]), E::load(y[i]), E::load(dy[i])));
  };
  parallel(ctx, n, [&](std::int64_t b, std::int64_t e) {
    switch (op) {
      case UnaryOp::kNeg: map(b, e, [](float, float, float g) { return -g; }); break;
      case UnaryOp::kExp: map(b, e, [](float, float v, float g) { return g * v; }); break;
      case UnaryOp::kLog: map(b, e, [](float u, float, float g) { return g / u; }); break;
      case UnaryOp::kSqrt: map(b, e, [](float, float v, float g) { return g * 0.5f / v; }); break;
      case UnaryOp::kSquare: map(b, e, [](float u, float, float g) { return g * 2.0f * u; }); break;
      case UnaryOp::kAbs: map(b, e, [](float u, float, float g) { return u > 0.0f ? g : (u < 0.0f ? -g : 0.0f); }); break;
      case UnaryOp::kRelu: map(b, e, [](float u, float, float g) { return u > 0.0f ? g : 0.0f; }); break;
      case UnaryOp::kSigmoid: map(b, e, [](float, float v, float g) { return g * v * (1.0f - v); }); break;
      case UnaryOp::kTanh: map(b, e, [](float, float v, float g) { return g * (1.0f - v * v); }); break;
      case UnaryOp::kGelu:
        map_vec(x, dy, dx, b, e, [p0](vec::Vec u, vec::Vec g) { return g * gelu_grad_v(u, p0); });
        break;
      case UnaryOp::kScale: map(b, e, [p0](float, float, float g) { return g * p0; }); break;
      case UnaryOp::kAddScalar: map(b, e, [](float, float, float g) { return g; }); break;
      case UnaryOp::kPowScalar:
        map(b, e, [p0](float u, float, float g) { return g * p0 * std::pow(u, p0 - 1.0f); });
        break;
      case UnaryOp::kClip: map(b, e, [p0, p1](float u, float, float g) { return clip_grad_of(u, g, p0, p1); }); break;
      case UnaryOp::kSilu: map_floats2(x, dy, dx, b, e, silu_backward_floats); break;
    }
  });
}

namespace {
template <BinaryOp Op>
inline float apply(float a, float b) {
  if constexpr (Op == BinaryOp::kAdd) return a + b;
  if constexpr (Op == BinaryOp::kSub) return a - b;
  if constexpr (Op == BinaryOp::kMul) return a * b;
  if constexpr (Op == BinaryOp::kDiv) return a / b;
  if constexpr (Op == BinaryOp::kMaximum) return max_of(a, b);
  if constexpr (Op == BinaryOp::kMinimum) return min_of(a, b);
}

template <CompareOp Op, typename T>
inline std::uint8_t test(T a, T b) {
  if constexpr (Op == CompareOp::kEqual) return a == b;
  if constexpr (Op == CompareOp::kNotEqual) return a != b;
  if constexpr (Op == CompareOp::kLess) return a < b;
  if constexpr (Op == CompareOp::kLessEqual) return a <= b;
  if constexpr (Op == CompareOp::kGreater) return a > b;
  if constexpr (Op == CompareOp::kGreaterEqual) return a >= b;
}

// The broadcast's dimensions with size-1 ones dropped and neighbours merged where both inputs
// step through them as one (a row-major block, or both repeating it): (R, C) + (C,) stays two
// dimensions, (N, H, W, C) + (C,) becomes (N*H*W, C), (4, 5, 3) + (4, 5, 3) one.
struct Collapsed {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t a_strides[kMaxRank] = {};
  std::int64_t b_strides[kMaxRank] = {};
};

Collapsed collapse(const BroadcastDesc& d) {
  Collapsed c;
  for (int i = 0; i < d.rank; ++i) {
    if (d.dims[i] == 1) continue;
    const int k = c.rank - 1;
    if (k >= 0 && c.a_strides[k] == d.a_strides[i] * d.dims[i] && c.b_strides[k] == d.b_strides[i] * d.dims[i]) {
      c.dims[k] *= d.dims[i];
      c.a_strides[k] = d.a_strides[i];
      c.b_strides[k] = d.b_strides[i];
      continue;
    }
    c.dims[c.rank] = d.dims[i];
    c.a_strides[c.rank] = d.a_strides[i];
    c.b_strides[c.rank] = d.b_strides[i];
    ++c.rank;
  }
  return c;
}

// out[i, j] = fn(a[ao + j * SA], b[bo + j * SB]) for one run of the innermost dimension. With
// the strides known at compile time (0 or 1) the loop vectorises: a row of (R, C) + (C,) is one
// vector operation, not C odometer steps.
// A repeated input is read once before the loop: out may alias it as far as the compiler knows.
template <int SA, int SB, typename A, typename O, typename Fn>
inline void inner_run(const A* a, const A* b, O* out, std::int64_t len, Fn fn) {
  if constexpr (SA == 0) {
    const A av = a[0];
    for (std::int64_t j = 0; j < len; ++j) out[j] = fn(av, b[j * SB]);
  } else if constexpr (SB == 0) {
    const A bv = b[0];
    for (std::int64_t j = 0; j < len; ++j) out[j] = fn(a[j], bv);
  } else {
    for (std::int64_t j = 0; j < len; ++j) out[j] = fn(a[j], b[j]);
  }
}

// out[i] = fn(a[ia], b[ib]) over the broadcast: runs of the innermost (collapsed) dimension, an
// odometer over the others (none where both inputs collapse to one run: contiguous, or a scalar
// beside a contiguous one). Each output element is fn of the same two inputs: the same bits.
template <typename A, typename O, typename Fn>
void broadcast_apply(ComputeContext& ctx, const BroadcastDesc& d, const A* a, const A* b, O* out, Fn fn) {
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  // Nothing to do for an empty output; the odometer below would divide by its zero dimension
  // (found by the parity harness: (0, 3) + (3,) raised SIGFPE in a debug build).
  if (n == 0) return;
  const Collapsed c = collapse(d);
  if (c.rank == 0) {  // every dimension 1: one element
    out[0] = fn(a[0], b[0]);
    return;
  }
  const int last = c.rank - 1;
  const std::int64_t sa = c.a_strides[last], sb = c.b_strides[last];
  const std::int64_t inner = c.dims[last];
  parallel(ctx, n, [&](std::int64_t s, std::int64_t e) {
    // Position of element s: its index in each outer dimension, and the inputs' offsets.
    std::int64_t idx[kMaxRank] = {};
    std::int64_t rem = s / inner, ao = 0, bo = 0;
    std::int64_t j = s % inner;
    for (int i = last - 1; i >= 0; --i) {
      idx[i] = rem % c.dims[i];
      rem /= c.dims[i];
      ao += idx[i] * c.a_strides[i];
      bo += idx[i] * c.b_strides[i];
    }
    for (std::int64_t i = s; i < e;) {
      const std::int64_t len = std::min(inner - j, e - i);
      const A* ar = a + ao + j * sa;
      const A* br = b + bo + j * sb;
      if (sa == 1 && sb == 1) inner_run<1, 1>(ar, br, out + i, len, fn);
      else if (sa == 1 && sb == 0) inner_run<1, 0>(ar, br, out + i, len, fn);
      else if (sa == 0 && sb == 1) inner_run<0, 1>(ar, br, out + i, len, fn);
      else
        for (std::int64_t k = 0; k < len; ++k) out[i + k] = fn(ar[k * sa], br[k * sb]);
      i += len;
      j = 0;
      // Next run: advance the outer odometer by one.
      for (int k = last - 1; k >= 0; --k) {
        ++idx[k];
        ao += c.a_strides[k];
        bo += c.b_strides[k];
        if (idx[k] < c.dims[k]) break;
        ao -= idx[k] * c.a_strides[k];
        bo -= idx[k] * c.b_strides[k];
        idx[k] = 0;
      }
    }
  });
}

template <BinaryOp Op, typename F>
void binary_impl(ComputeContext& ctx, const BroadcastDesc& d, const F* a, const F* b, F* out) {
  using E = Elem<F>;
  broadcast_apply(ctx, d, a, b, out, [](F x, F y) { return E::store(apply<Op>(E::load(x), E::load(y))); });
}

template <CompareOp Op, typename T>
void compare_impl(ComputeContext& ctx, const BroadcastDesc& d, const T* a, const T* b, std::uint8_t* out) {
  using E = Elem<T>;
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    broadcast_apply(ctx, d, a, b, out, [](T x, T y) { return test<Op>(E::load(x), E::load(y)); });
  } else {
    broadcast_apply(ctx, d, a, b, out, [](T x, T y) { return test<Op>(x, y); });
  }
}
}  // namespace

template <typename F>
void binary(ComputeContext& ctx, BinaryOp op, const BroadcastDesc& d, const void* av, const void* bv, void* ov) {
  const F* a = static_cast<const F*>(av);
  const F* b = static_cast<const F*>(bv);
  F* out = static_cast<F*>(ov);
  switch (op) {
    case BinaryOp::kAdd: return binary_impl<BinaryOp::kAdd>(ctx, d, a, b, out);
    case BinaryOp::kSub: return binary_impl<BinaryOp::kSub>(ctx, d, a, b, out);
    case BinaryOp::kMul: return binary_impl<BinaryOp::kMul>(ctx, d, a, b, out);
    case BinaryOp::kDiv: return binary_impl<BinaryOp::kDiv>(ctx, d, a, b, out);
    case BinaryOp::kMaximum: return binary_impl<BinaryOp::kMaximum>(ctx, d, a, b, out);
    case BinaryOp::kMinimum: return binary_impl<BinaryOp::kMinimum>(ctx, d, a, b, out);
  }
}

template <typename T>
void compare(ComputeContext& ctx, CompareOp op, const BroadcastDesc& d, const void* av, const void* bv,
             std::uint8_t* out) {
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  switch (op) {
    case CompareOp::kEqual: return compare_impl<CompareOp::kEqual>(ctx, d, a, b, out);
    case CompareOp::kNotEqual: return compare_impl<CompareOp::kNotEqual>(ctx, d, a, b, out);
    case CompareOp::kLess: return compare_impl<CompareOp::kLess>(ctx, d, a, b, out);
    case CompareOp::kLessEqual: return compare_impl<CompareOp::kLessEqual>(ctx, d, a, b, out);
    case CompareOp::kGreater: return compare_impl<CompareOp::kGreater>(ctx, d, a, b, out);
    case CompareOp::kGreaterEqual: return compare_impl<CompareOp::kGreaterEqual>(ctx, d, a, b, out);
  }
}

template <typename F>
void where(ComputeContext& ctx, const WhereDesc& w, const std::uint8_t* cond, const void* av, const void* bv,
           void* ov) {
  const BroadcastDesc& d = w.ab;
  const F* a = static_cast<const F*>(av);
  const F* b = static_cast<const F*>(bv);
  F* out = static_cast<F*>(ov);
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  if (n == 0) return;
  // An odometer over the output, the three operands' offsets kept beside it (not a hot op: masks).
  parallel(ctx, n, [&](std::int64_t s, std::int64_t e) {
    std::int64_t idx[kMaxRank] = {};
    std::int64_t rem = s, ao = 0, bo = 0, co = 0;
    for (int k = d.rank - 1; k >= 0; --k) {
      idx[k] = rem % d.dims[k];
      rem /= d.dims[k];
      ao += idx[k] * d.a_strides[k];
      bo += idx[k] * d.b_strides[k];
      co += idx[k] * w.cond_strides[k];
    }
    for (std::int64_t i = s; i < e; ++i) {
      out[i] = cond[co] != 0 ? a[ao] : b[bo];
      for (int k = d.rank - 1; k >= 0; --k) {
        ++idx[k];
        ao += d.a_strides[k];
        bo += d.b_strides[k];
        co += w.cond_strides[k];
        if (idx[k] < d.dims[k]) break;
        ao -= idx[k] * d.a_strides[k];
        bo -= idx[k] * d.b_strides[k];
        co -= idx[k] * w.cond_strides[k];
        idx[k] = 0;
      }
    }
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, unary)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, unary_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, binary)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, where)
LOCKSTEP_INSTANTIATE_KERNEL(Any, compare)

}  // namespace lockstep::backend::cpu
