// Fused optimizer updates: one pass over a variable's memory per step.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/combine_block.hpp"
#include "backend/cpu/cpu_kernels.hpp"
#include "backend/cpu/flush_denormals.hpp"

namespace lockstep::backend::cpu {

template <typename F>
double sum_squares(ComputeContext&, const void* xv, std::int64_t n) {
  const F* x = static_cast<const F*>(xv);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = Elem<F>::load(x[i]);
    s += v * v;
  }
  return s;
}

template <typename F>
void scale_clip(ComputeContext& ctx, const void* xv, void* yv, std::int64_t n, float scale, float clip) {
  const F* x = static_cast<const F*>(xv);
  F* y = static_cast<F*>(yv);
  // Comparisons, not fmin/fmax: those return the non-NaN operand, so a NaN gradient came out as
  // -clip (or -inf under clipnorm alone) and the step went ahead finite (found by the parity
  // harness). A NaN stays NaN, as in tf.clip_by_value.
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) {
      const float v = Elem<F>::load(x[i]) * scale;
      y[i] = Elem<F>::store(v < -clip ? -clip : v > clip ? clip : v);
    }
  });
}

template <typename F>
void sum_squares_add(ComputeContext& ctx, const void* x, std::int64_t n, double* acc) {
  *acc += sum_squares<F>(ctx, x, n);
}

template <typename F>
void clip_by_norms(ComputeContext& ctx, const void* xv, void* yv, std::int64_t n, const NormClip& c,
                   const double* global_sq, const double* own_sq) {
  // The host computes nothing: the factor is read where the norms are (the same rule on every backend).
  scale_clip<F>(ctx, xv, yv, n, clip_math::clip_factor(c, global_sq, own_sq), c.clipvalue);
}

namespace {
void sgd_loop(float* __restrict w, float* __restrict m, const float* __restrict g, std::int64_t n, float lr, float mu,
              bool nesterov) {
  if (!m) {
    for (std::int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    m[i] = mu * m[i] - lr * g[i];
    w[i] += nesterov ? mu * m[i] - lr * g[i] : m[i];
  }
}
}  // namespace

void sgd_update(ComputeContext& ctx, void* wv, void* mv, const void* gv, std::int64_t n,
                const StepBlock* step, float mu, bool nesterov) {
  if (step->state.skipped) return;
  const float lr = step->scalars.lr;
  float* w = static_cast<float*>(wv);
  const float* g = static_cast<const float*>(gv);
  float* m = static_cast<float*>(mv);
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    const FlushDenormals flush;  // the momentum decays by mu every step
    sgd_loop(w + b, m ? m + b : nullptr, g + b, e - b, lr, mu, nesterov);
  });
}

namespace {
// One pass over the arrays; restrict and no branch inside, so that it vectorises.
void adam_loop(float* __restrict w, float* __restrict m, float* __restrict v, const float* __restrict g,
               std::int64_t n, float alpha, float one_b1, float one_b2, float eps, float decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float wi = w[i] - w[i] * decay;  // AdamW's decay (decay = 0 for Adam: exact no-op)
    const float mi = m[i] + (g[i] - m[i]) * one_b1;
    const float vi = v[i] + (g[i] * g[i] - v[i]) * one_b2;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - (mi * alpha) / (std::sqrt(vi) + eps);
  }
}
}  // namespace

// Elementwise, so splitting it over the device's threads changes no bit; one thread alone reached
// about half the memory bandwidth (Adam was 17% of a mixed_bfloat16 step on one 2-thread device).
void adam_update(ComputeContext& ctx, void* wv, void* mv, void* vv, const void* gv, std::int64_t n,
                 const AdamStep& s, const StepBlock* step) {
  if (step->state.skipped) return;
  const float alpha = step->scalars.alpha, decay = step->scalars.decay;
  float* w = static_cast<float*>(wv);
  float* m = static_cast<float*>(mv);
  float* v = static_cast<float*>(vv);
  const float* g = static_cast<const float*>(gv);
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    const FlushDenormals flush;  // the moments decay by beta_1, beta_2 every step
    adam_loop(w + b, m + b, v + b, g + b, e - b, alpha, s.one_minus_b1, s.one_minus_b2, s.epsilon, decay);
  });
}

namespace {
// Keras 3's RMSprop (keras/src/optimizers/rmsprop.py, update_step), in its float32 order:
//   v = rho v + (1 - rho) g^2
//   centered: a = rho a + (1 - rho) g;  d = (v - a^2) + eps,  else d = v + eps
//   x = (lr g) / sqrt(d)
//   momentum: m = momentum m + x; w -= m,  else w -= x
// One loop per variant, no branch inside, so that each vectorises.
template <bool kCentered, bool kMomentum>
void rmsprop_loop(float* __restrict w, float* __restrict vel, float* __restrict mom, float* __restrict avg,
                  const float* __restrict g, std::int64_t n, float lr, const RmspropStep& s) {
  const float rho = s.rho, one_rho = s.one_minus_rho, eps = s.epsilon, mu = s.momentum;
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float vi = rho * vel[i] + one_rho * (gi * gi);
    vel[i] = vi;
    float d = vi + eps;
    if constexpr (kCentered) {
      const float ai = rho * avg[i] + one_rho * gi;
      avg[i] = ai;
      d = (vi - ai * ai) + eps;
    }
    const float x = (lr * gi) / std::sqrt(d);
    if constexpr (kMomentum) {
      const float mi = mu * mom[i] + x;
      mom[i] = mi;
      w[i] -= mi;
    } else {
      w[i] -= x;
    }
  }
}
}  // namespace

void rmsprop_update(ComputeContext& ctx, void* wv, void* velv, void* momv, void* avgv, const void* gv,
                    std::int64_t n, const RmspropStep& s, const StepBlock* step) {
  if (step->state.skipped) return;
  const float lr = step->scalars.lr;
  float* w = static_cast<float*>(wv);
  float* vel = static_cast<float*>(velv);
  float* mom = static_cast<float*>(momv);
  float* avg = static_cast<float*>(avgv);
  const float* g = static_cast<const float*>(gv);
  parallel(ctx, n, [=](std::int64_t b, std::int64_t e) {
    const FlushDenormals flush;  // the velocity and momentum decay by rho and momentum every step
    float* mb = mom ? mom + b : nullptr;
    float* ab = avg ? avg + b : nullptr;
    if (avg && mom) rmsprop_loop<true, true>(w + b, vel + b, mb, ab, g + b, e - b, lr, s);
    else if (avg) rmsprop_loop<true, false>(w + b, vel + b, mb, ab, g + b, e - b, lr, s);
    else if (mom) rmsprop_loop<false, true>(w + b, vel + b, mb, ab, g + b, e - b, lr, s);
    else rmsprop_loop<false, false>(w + b, vel + b, mb, ab, g + b, e - b, lr, s);
  });
}

// One variable after another, each as its own update runs (the launches saved are a GPU's).
void sgd_update_multi(ComputeContext& ctx, const MultiUpdateDesc& d, const StepBlock* step, float mu,
                      bool nesterov) {
  for (int j = 0; j < d.count; ++j) sgd_update(ctx, d.w[j], d.m[j], d.g[j], d.n[j], step, mu, nesterov);
}

void adam_update_multi(ComputeContext& ctx, const MultiUpdateDesc& d, const AdamStep& s,
                       const StepBlock* step) {
  for (int j = 0; j < d.count; ++j) adam_update(ctx, d.w[j], d.m[j], d.v[j], d.g[j], d.n[j], s, step);
}

void rmsprop_update_multi(ComputeContext& ctx, const MultiUpdateDesc& d, const RmspropStep& s,
                          const StepBlock* step) {
  for (int j = 0; j < d.count; ++j) rmsprop_update(ctx, d.w[j], d.v[j], d.m[j], d.a[j], d.g[j], d.n[j], s, step);
}

namespace {
// The sharded update of replicas that share memory, block by block: the replicas' gradients
// summed into a block on the stack by combine's own block sum (combine_block.hpp), before the
// update's flush of subnormals, so the sum has the all-reduce's bits; the update on it; and the
// new weights copied into the other replicas' copies while they are in L1. One pass where the
// reduce-scatter packed every gradient into a bucket, wrote the sums and the update read them back.
template <typename Update>
void summed_update(ComputeContext& ctx, float* w, const void* const* gv, int n_g, void* const* copies_v, int n_copies,
                   std::int64_t n, const Update& update) {
  const float* const* g = reinterpret_cast<const float* const*>(gv);
  float* const* copies = reinterpret_cast<float* const*>(copies_v);
  parallel(ctx, n, [&](std::int64_t b, std::int64_t e) {
    constexpr std::int64_t kBlock = 1024;
    alignas(64) float acc[kBlock];
    for (std::int64_t s = b; s < e; s += kBlock) {
      const std::int64_t len = std::min(kBlock, e - s);
      const float* gs = g[0] + s;
      if (n_g > 1) {
        combine_block<ReduceOp::kSum>(g, n_g, s, len, acc, [](float v) { return v; });
        gs = acc;
      }
      {
        const FlushDenormals flush;
        update(s, len, gs);
      }
      for (int c = 0; c < n_copies; ++c)
        std::memcpy(copies[c] + s, w + s, static_cast<std::size_t>(len) * sizeof(float));
    }
  });
}
}  // namespace

void sgd_update_summed(ComputeContext& ctx, void* wv, void* mv, const void* const* g, int n_g,
                       void* const* copies, int n_copies, std::int64_t n, const StepBlock* step, float mu,
                       bool nesterov) {
  if (step->state.skipped) return;
  const float lr = step->scalars.lr;
  float* w = static_cast<float*>(wv);
  float* m = static_cast<float*>(mv);
  summed_update(ctx, w, g, n_g, copies, n_copies, n, [=](std::int64_t s, std::int64_t len, const float* gs) {
    sgd_loop(w + s, m ? m + s : nullptr, gs, len, lr, mu, nesterov);
  });
}

void adam_update_summed(ComputeContext& ctx, void* wv, void* mv, void* vv, const void* const* g, int n_g,
                        void* const* copies, int n_copies, std::int64_t n, const AdamStep& a,
                        const StepBlock* step) {
  if (step->state.skipped) return;
  const float alpha = step->scalars.alpha, decay = step->scalars.decay;
  float* w = static_cast<float*>(wv);
  float* m = static_cast<float*>(mv);
  float* v = static_cast<float*>(vv);
  summed_update(ctx, w, g, n_g, copies, n_copies, n, [=](std::int64_t s, std::int64_t len, const float* gs) {
    adam_loop(w + s, m + s, v + s, gs, len, alpha, a.one_minus_b1, a.one_minus_b2, a.epsilon, decay);
  });
}

// The step's numbers in host memory: the one rule of step_state.hpp, run here.
void step_begin(ComputeContext&, StepBlock* block) { step_state::begin_step(*block); }
void step_rule_set(ComputeContext&, StepBlock* block, const StepRule& rule) { block->rule = rule; }
void step_set(ComputeContext&, StepBlock* block, std::int64_t iterations) { step_state::set_step(*block, iterations); }

// The loss scale kept in the block: loss_scale_math.hpp's rule and factors, run here.
void loss_scale_set(ComputeContext&, StepBlock* block, const LossScaleState& state) { block->loss_scale = state; }
void loss_seed(ComputeContext&, const void* lossv, std::int64_t n, float factor, float weight, const StepBlock* block,
               double inverse_n, void* seedv) {
  // f * weight rounded once, as scale's backward multiplies (a weight of 1 leaves f's bits).
  const float f = (block ? loss_scale_math::loss_factor(inverse_n, block->loss_scale.scale) : factor) * weight;
  const float* loss = static_cast<const float*>(lossv);
  float* seed = static_cast<float*>(seedv);
  if (!loss) {
    seed[0] = f;
    return;
  }
  std::fill(seed, seed + n, f);  // sum's backward: f at every loss, finite or not
}
void loss_scale_update(ComputeContext&, StepBlock* block, std::int64_t growth_steps) {
  step_state::update_loss_scale(*block, growth_steps);
}

// scale()'s expression (x * factor in float32, stored in x's dtype), then the finite check
// (mark_not_finite) of what was stored.
template <typename F>
void unscale_check(ComputeContext&, const void* xv, void* yv, std::int64_t n, StepBlock* block) {
  const float inverse = step_state::unscale_factor(*block);
  const F* x = static_cast<const F*>(xv);
  F* y = static_cast<F*>(yv);
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = Elem<F>::store(Elem<F>::load(x[i]) * inverse);
    step_state::mark_not_finite(*block, Elem<F>::load(y[i]));
  }
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, sum_squares)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, scale_clip)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, sum_squares_add)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, clip_by_norms)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, unscale_check)

}  // namespace lockstep::backend::cpu
