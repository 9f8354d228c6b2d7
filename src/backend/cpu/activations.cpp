// sigmoid, tanh and silu a vector at a time (activations.hpp).
#include "backend/cpu/activations.hpp"

#include <algorithm>

#include "backend/cpu/vec_math.hpp"

namespace lockstep::backend::cpu {

namespace {
using vec::splat;
using vec::Vec;

// sigmoid(|x|) = 1 / (1 + e) and sigmoid(-|x|) = e / (1 + e) with e = exp(-|x|) <= 1: exp's
// argument stays where vec::exp is accurate, and a very negative x keeps its relative accuracy.
inline Vec sigmoid_v(Vec x) {
  const Vec a = x < splat(0.0f) ? -x : x;
  const Vec e = vec::exp(-a);
  return x >= splat(0.0f) ? 1.0f / (1.0f + e) : e / (1.0f + e);  // NaN: neither compare holds, e is NaN
}

// |x| < 0.3125: tanh's odd series to x^11 (the next term is below 4e-9 of the value), as x (1 + ...)
// so that -0 stays -0; beyond, (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.54 (no cancellation
// worse than a factor 1.2), the sign put back.
inline Vec tanh_v(Vec x) {
  const Vec a = x < splat(0.0f) ? -x : x;
  const Vec x2 = x * x;
  Vec p = splat(-1382.0f / 155925.0f);
  p = p * x2 + 62.0f / 2835.0f;
  p = p * x2 + -17.0f / 315.0f;
  p = p * x2 + 2.0f / 15.0f;
  p = p * x2 + -1.0f / 3.0f;
  const Vec small = x * (1.0f + x2 * p);
  const Vec e = vec::exp(a * -2.0f);
  const Vec t = (1.0f - e) / (1.0f + e);
  return a < splat(0.3125f) ? small : x < splat(0.0f) ? -t : t;
}

template <typename Fn>
void map(const float* x, float* y, std::int64_t n, Fn fn) {
  constexpr int kL = vec::kLanes;
  std::int64_t i = 0;
  for (; i + kL <= n; i += kL) vec::store(y + i, fn(vec::load(x + i)));
  if (i < n) {
    float buf[kL] = {};
    std::copy(x + i, x + n, buf);
    vec::store(buf, fn(vec::load(buf)));
    std::copy(buf, buf + (n - i), y + i);
  }
}

// map's two-input form: z = fn(x, y).
template <typename Fn>
void map2(const float* x, const float* y, float* z, std::int64_t n, Fn fn) {
  constexpr int kL = vec::kLanes;
  std::int64_t i = 0;
  for (; i + kL <= n; i += kL) vec::store(z + i, fn(vec::load(x + i), vec::load(y + i)));
  if (i < n) {
    float a[kL] = {}, b[kL] = {};
    std::copy(x + i, x + n, a);
    std::copy(y + i, y + n, b);
    vec::store(a, fn(vec::load(a), vec::load(b)));
    std::copy(a, a + (n - i), z + i);
  }
}
}  // namespace

void sigmoid_floats(const float* x, float* y, std::int64_t n) { map(x, y, n, sigmoid_v); }
void tanh_floats(const float* x, float* y, std::int64_t n) { map(x, y, n, tanh_v); }
void silu_floats(const float* x, float* y, std::int64_t n) {
  map(x, y, n, [](Vec v) { return v * sigmoid_v(v); });
}
// silu's gradient s (1 + x (1 - s)) takes 1 - s = sigmoid(-x) from the same e = exp(-|x|) as s:
// 1 - s computed by subtraction loses s's error times |x| (14 ulps of the result at x = 10).
void silu_backward_floats(const float* x, const float* dy, float* dx, std::int64_t n) {
  map2(x, dy, dx, n, [](Vec u, Vec g) {
    const Vec a = u < splat(0.0f) ? -u : u;
    const Vec e = vec::exp(-a);
    const Vec big = 1.0f / (1.0f + e), small = e / (1.0f + e);
    const Vec s = u >= splat(0.0f) ? big : small;  // NaN: the compare fails and e is NaN
    const Vec c = u >= splat(0.0f) ? small : big;   // 1 - s
    return g * s * (1.0f + u * c);
  });
}

}  // namespace lockstep::backend::cpu
