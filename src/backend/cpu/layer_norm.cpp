// LayerNormalization's two kernels, float32: each row is read while it is in cache, its sums in
// vectors of the machine's width (vec_math.hpp), a row's last partial vector padded so that a
// padded lane adds nothing.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/vec_math.hpp"

namespace lockstep::backend::cpu {

namespace {
constexpr std::int64_t kLanes = vec::kLanes;

// p[0, len) in a vector, the lanes past len set to pad.
vec::Vec load_part(const float* p, std::int64_t len, float pad) {
  if (len == kLanes) return vec::load(p);
  float part[kLanes];
  for (std::int64_t k = 0; k < kLanes; ++k) part[k] = k < len ? p[k] : pad;
  return vec::load(part);
}

void store_part(float* p, std::int64_t len, vec::Vec v) {
  if (len == kLanes) return vec::store(p, v);
  for (std::int64_t k = 0; k < len; ++k) p[k] = v[k];
}
}  // namespace

void layer_norm(ComputeContext& ctx, const void* xv, const void* gammav, const void* betav, void* yv, void* meanv,
                void* inv_stdv, std::int64_t rows, std::int64_t cols, float epsilon) {
  const auto* x = static_cast<const float*>(xv);
  const auto* gamma = static_cast<const float*>(gammav);
  const auto* beta = static_cast<const float*>(betav);
  auto* y = static_cast<float*>(yv);
  auto* mean = static_cast<float*>(meanv);
  auto* inv_std = static_cast<float*>(inv_stdv);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  parallel_rows(ctx, rows, cols * 3, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      vec::Vec s{};
      for (std::int64_t c = 0; c < cols; c += kLanes) s += load_part(xr + c, std::min(kLanes, cols - c), 0.0f);
      const float m = vec::sum(s) * inv_cols;
      vec::Vec q{};
      for (std::int64_t c = 0; c < cols; c += kLanes) {
        const vec::Vec d = load_part(xr + c, std::min(kLanes, cols - c), m) - m;
        q += d * d;
      }
      const float is = 1.0f / std::sqrt(vec::sum(q) * inv_cols + epsilon);
      for (std::int64_t c = 0; c < cols; c += kLanes) {
        const std::int64_t len = std::min(kLanes, cols - c);
        vec::Vec v = (load_part(xr + c, len, m) - m) * is;
        if (gamma) v *= load_part(gamma + c, len, 1.0f);
        if (beta) v += load_part(beta + c, len, 0.0f);
        store_part(y + r * cols + c, len, v);
      }
      mean[r] = m;
      inv_std[r] = is;
    }
  });
}

void layer_norm_backward(ComputeContext& ctx, const void* xv, const void* gammav, const void* dyv, const void* meanv,
                         const void* inv_stdv, void* dxv, std::int64_t rows, std::int64_t cols) {
  const auto* x = static_cast<const float*>(xv);
  const auto* gamma = static_cast<const float*>(gammav);
  const auto* dy = static_cast<const float*>(dyv);
  const auto* mean = static_cast<const float*>(meanv);
  const auto* inv_std = static_cast<const float*>(inv_stdv);
  auto* dx = static_cast<float*>(dxv);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  parallel_rows(ctx, rows, cols * 4, [=](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r) {
      const float* xr = x + r * cols;
      const float* gr = dy + r * cols;
      const float m = mean[r], is = inv_std[r];
      // h = dy gamma and xhat for the lanes of [c, c + len); padded lanes are 0 in h.
      const auto h_at = [&](std::int64_t c, std::int64_t len) {
        const vec::Vec g = load_part(gr + c, len, 0.0f);
        return gamma ? g * load_part(gamma + c, len, 0.0f) : g;
      };
      const auto xhat_at = [&](std::int64_t c, std::int64_t len) { return (load_part(xr + c, len, m) - m) * is; };
      vec::Vec sh{}, shx{};
      for (std::int64_t c = 0; c < cols; c += kLanes) {
        const std::int64_t len = std::min(kLanes, cols - c);
        const vec::Vec h = h_at(c, len);
        sh += h;
        shx += h * xhat_at(c, len);
      }
      const float mh = vec::sum(sh) * inv_cols, mhx = vec::sum(shx) * inv_cols;
      for (std::int64_t c = 0; c < cols; c += kLanes) {
        const std::int64_t len = std::min(kLanes, cols - c);
        store_part(dx + r * cols + c, len, (h_at(c, len) - mh - xhat_at(c, len) * mhx) * is);
      }
    }
  });
}

}  // namespace lockstep::backend::cpu
