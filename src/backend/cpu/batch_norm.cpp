// BatchNormalization's passes over x [rows, channels], float32. Composed of generic ops the
// layer made about fifteen passes over its input per training step (subtract, square, reduce,
// multiply, add, and their gradients, several with a broadcast); these kernels make five: the
// variance's and the gradient's per-channel sums, the normalisation, the input's gradient (the
// mean is reduce_sum's).
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
// The rows are cut into this many parts whatever the pool's size; each part's sums are its own
// (double) and the parts are added in order, so the result does not depend on the threads.
constexpr std::int64_t kParts = 16;

std::int64_t part_begin(std::int64_t p, std::int64_t rows) { return p * rows / kParts; }
}  // namespace

void batch_norm_reduce(ComputeContext& ctx, const void* xv, const void* meanv, const void* dyv, const void* inv_stdv,
                       void* outv, std::int64_t rows, std::int64_t cols) {
  const auto* x = static_cast<const float*>(xv);
  const auto* mean = static_cast<const float*>(meanv);
  const auto* dy = static_cast<const float*>(dyv);
  const auto* inv_std = static_cast<const float*>(inv_stdv);
  auto* out = static_cast<float*>(outv);
  const std::int64_t sums = dy ? 2 : 1, width = sums * cols;
  // The parts' sums: kept by this thread (the pool's driver) and reused, so that a steady-state
  // step allocates nothing.
  thread_local std::vector<double> scratch;
  scratch.assign(static_cast<std::size_t>(kParts * width), 0.0);
  double* parts = scratch.data();
  const std::int64_t part_cost = std::max<std::int64_t>(1, rows / kParts) * cols * sums;
  parallel_rows(ctx, kParts, part_cost, [=](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p) {
      double* acc = parts + p * width;
      const std::int64_t r1 = part_begin(p + 1, rows);
      for (std::int64_t r = part_begin(p, rows); r < r1; ++r) {
        const float* xr = x + r * cols;
        if (!dy) {
          for (std::int64_t c = 0; c < cols; ++c) {
            const float d = xr[c] - mean[c];
            acc[c] += static_cast<double>(d) * d;
          }
        } else {
          const float* gr = dy + r * cols;
          double* acc_xhat = acc + cols;
          for (std::int64_t c = 0; c < cols; ++c) {
            const float xhat = (xr[c] - mean[c]) * inv_std[c];
            acc[c] += gr[c];
            acc_xhat[c] += static_cast<double>(gr[c] * xhat);
          }
        }
      }
    }
  });
  for (std::int64_t i = 0; i < width; ++i) {
    double s = 0.0;
    for (std::int64_t p = 0; p < kParts; ++p) s += parts[p * width + i];
    out[i] = static_cast<float>(s);
  }
}

void batch_norm_apply(ComputeContext& ctx, const void* xv, const void* meanv, const void* scalev, const void* offsetv,
                      void* yv, std::int64_t rows, std::int64_t cols) {
  const auto* x = static_cast<const float*>(xv);
  const auto* mean = static_cast<const float*>(meanv);
  const auto* scale = static_cast<const float*>(scalev);
  const auto* offset = static_cast<const float*>(offsetv);
  auto* y = static_cast<float*>(yv);
  parallel_rows(ctx, rows, cols, [=](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      if (offset) {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean[c]) * scale[c] + offset[c];
      } else {
        for (std::int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean[c]) * scale[c];
      }
    }
  });
}

void batch_norm_backward(ComputeContext& ctx, const void* dyv, const void* xv, const void* meanv, const void* inv_stdv,
                         const void* scalev, const void* mean_dyv, const void* mean_dy_xhatv, void* dxv,
                         std::int64_t rows, std::int64_t cols) {
  const auto* dy = static_cast<const float*>(dyv);
  const auto* x = static_cast<const float*>(xv);
  const auto* mean = static_cast<const float*>(meanv);
  const auto* inv_std = static_cast<const float*>(inv_stdv);
  const auto* scale = static_cast<const float*>(scalev);
  const auto* mean_dy = static_cast<const float*>(mean_dyv);
  const auto* mean_dy_xhat = static_cast<const float*>(mean_dy_xhatv);
  auto* dx = static_cast<float*>(dxv);
  parallel_rows(ctx, rows, cols, [=](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      const float* gr = dy + r * cols;
      float* dr = dx + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const float xhat = (xr[c] - mean[c]) * inv_std[c];
        dr[c] = scale[c] * (gr[c] - mean_dy[c] - xhat * mean_dy_xhat[c]);
      }
    }
  });
}

}  // namespace lockstep::backend::cpu
