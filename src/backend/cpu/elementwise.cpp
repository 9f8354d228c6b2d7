#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
// Elementwise loops go parallel only past this many elements: below it a pool wake-up
// costs more than the loop.
constexpr std::int64_t kGrain = 1 << 15;

template <typename F>
void parallel(ComputeContext& ctx, std::int64_t n, F&& f) {
  if (n < 2 * kGrain || ctx.threads() == 1) {
    f(std::int64_t{0}, n);
  } else {
    ctx.pool().parallel_for(n, kGrain, f);
  }
}

inline float gelu_f(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
inline float gelu_grad_f(float x) {
  const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678118654752f));
  const float pdf = 0.3989422804014327f * std::exp(-0.5f * x * x);
  return cdf + x * pdf;
}
}  // namespace

void unary(ComputeContext& ctx, UnaryOp op, const float* x, float* y, std::int64_t n, float p0, float p1) {
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    switch (op) {
      case UnaryOp::kNeg: for (auto i = b; i < e; ++i) y[i] = -x[i]; break;
      case UnaryOp::kExp: for (auto i = b; i < e; ++i) y[i] = std::exp(x[i]); break;
      case UnaryOp::kLog: for (auto i = b; i < e; ++i) y[i] = std::log(x[i]); break;
      case UnaryOp::kSqrt: for (auto i = b; i < e; ++i) y[i] = std::sqrt(x[i]); break;
      case UnaryOp::kSquare: for (auto i = b; i < e; ++i) y[i] = x[i] * x[i]; break;
      case UnaryOp::kAbs: for (auto i = b; i < e; ++i) y[i] = std::fabs(x[i]); break;
      case UnaryOp::kRelu: for (auto i = b; i < e; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f; break;
      case UnaryOp::kSigmoid: for (auto i = b; i < e; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i])); break;
      case UnaryOp::kTanh: for (auto i = b; i < e; ++i) y[i] = std::tanh(x[i]); break;
      case UnaryOp::kGelu: for (auto i = b; i < e; ++i) y[i] = gelu_f(x[i]); break;
      case UnaryOp::kScale: for (auto i = b; i < e; ++i) y[i] = x[i] * p0; break;
      case UnaryOp::kAddScalar: for (auto i = b; i < e; ++i) y[i] = x[i] + p0; break;
      case UnaryOp::kPowScalar: for (auto i = b; i < e; ++i) y[i] = std::pow(x[i], p0); break;
      case UnaryOp::kClip: for (auto i = b; i < e; ++i) y[i] = std::min(std::max(x[i], p0), p1); break;
    }
  });
}

void unary_backward(ComputeContext& ctx, UnaryOp op, const float* x, const float* y, const float* dy, float* dx,
                    std::int64_t n, float p0, float p1) {
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    switch (op) {
      case UnaryOp::kNeg: for (auto i = b; i < e; ++i) dx[i] = -dy[i]; break;
      case UnaryOp::kExp: for (auto i = b; i < e; ++i) dx[i] = dy[i] * y[i]; break;
      case UnaryOp::kLog: for (auto i = b; i < e; ++i) dx[i] = dy[i] / x[i]; break;
      case UnaryOp::kSqrt: for (auto i = b; i < e; ++i) dx[i] = dy[i] * 0.5f / y[i]; break;
      case UnaryOp::kSquare: for (auto i = b; i < e; ++i) dx[i] = dy[i] * 2.0f * x[i]; break;
      case UnaryOp::kAbs:
        for (auto i = b; i < e; ++i) dx[i] = x[i] > 0.0f ? dy[i] : (x[i] < 0.0f ? -dy[i] : 0.0f);
        break;
      case UnaryOp::kRelu: for (auto i = b; i < e; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f; break;
      case UnaryOp::kSigmoid: for (auto i = b; i < e; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]); break;
      case UnaryOp::kTanh: for (auto i = b; i < e; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]); break;
      case UnaryOp::kGelu: for (auto i = b; i < e; ++i) dx[i] = dy[i] * gelu_grad_f(x[i]); break;
      case UnaryOp::kScale: for (auto i = b; i < e; ++i) dx[i] = dy[i] * p0; break;
      case UnaryOp::kAddScalar: for (auto i = b; i < e; ++i) dx[i] = dy[i]; break;
      case UnaryOp::kPowScalar:
        for (auto i = b; i < e; ++i) dx[i] = dy[i] * p0 * std::pow(x[i], p0 - 1.0f);
        break;
      case UnaryOp::kClip:
        for (auto i = b; i < e; ++i) dx[i] = (x[i] >= p0 && x[i] <= p1) ? dy[i] : 0.0f;
        break;
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
  if constexpr (Op == BinaryOp::kMaximum) return a > b ? a : b;
}

template <BinaryOp Op>
void binary_impl(ComputeContext& ctx, const BroadcastDesc& d, const float* a, const float* b, float* out) {
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  // Fast paths: both contiguous; b a scalar; a a scalar; b broadcast along rows.
  bool a_contig = true, b_contig = true, b_scalar = true, a_scalar = true;
  std::int64_t expect = 1;
  for (int i = d.rank - 1; i >= 0; --i) {
    if (d.dims[i] != 1) {
      a_contig &= d.a_strides[i] == expect;
      b_contig &= d.b_strides[i] == expect;
      b_scalar &= d.b_strides[i] == 0;
      a_scalar &= d.a_strides[i] == 0;
    }
    expect *= d.dims[i];
  }
  if (a_contig && b_contig) {
    parallel(ctx, n, [=](std::int64_t s, std::int64_t e) {
      for (auto i = s; i < e; ++i) out[i] = apply<Op>(a[i], b[i]);
    });
    return;
  }
  if (a_contig && b_scalar) {
    const float bv = b[0];
    parallel(ctx, n, [=](std::int64_t s, std::int64_t e) {
      for (auto i = s; i < e; ++i) out[i] = apply<Op>(a[i], bv);
    });
    return;
  }
  if (a_scalar && b_contig) {
    const float av = a[0];
    parallel(ctx, n, [=](std::int64_t s, std::int64_t e) {
      for (auto i = s; i < e; ++i) out[i] = apply<Op>(av, b[i]);
    });
    return;
  }
  // General case: odometer over the output's dimensions.
  parallel(ctx, n, [&](std::int64_t s, std::int64_t e) {
    std::int64_t idx[kMaxRank] = {};
    std::int64_t rem = s, ao = 0, bo = 0;
    for (int i = d.rank - 1; i >= 0; --i) {
      idx[i] = rem % d.dims[i];
      rem /= d.dims[i];
      ao += idx[i] * d.a_strides[i];
      bo += idx[i] * d.b_strides[i];
    }
    for (auto i = s; i < e; ++i) {
      out[i] = apply<Op>(a[ao], b[bo]);
      for (int k = d.rank - 1; k >= 0; --k) {
        ++idx[k];
        ao += d.a_strides[k];
        bo += d.b_strides[k];
        if (idx[k] < d.dims[k]) break;
        ao -= idx[k] * d.a_strides[k];
        bo -= idx[k] * d.b_strides[k];
        idx[k] = 0;
      }
    }
  });
}
}  // namespace

void binary(ComputeContext& ctx, BinaryOp op, const BroadcastDesc& d, const float* a, const float* b, float* out) {
  switch (op) {
    case BinaryOp::kAdd: return binary_impl<BinaryOp::kAdd>(ctx, d, a, b, out);
    case BinaryOp::kSub: return binary_impl<BinaryOp::kSub>(ctx, d, a, b, out);
    case BinaryOp::kMul: return binary_impl<BinaryOp::kMul>(ctx, d, a, b, out);
    case BinaryOp::kDiv: return binary_impl<BinaryOp::kDiv>(ctx, d, a, b, out);
    case BinaryOp::kMaximum: return binary_impl<BinaryOp::kMaximum>(ctx, d, a, b, out);
  }
}

}  // namespace lockstep::backend::cpu
