// Fused optimizer updates (one pass over a variable's memory per step), the step's numbers
// (step_begin, which also ends the step before), the sum of squares that gradient clipping
// needs, accumulated in double in a fixed order, and the clip by those norms.
#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"

namespace lockstep::backend::cuda {

namespace {
constexpr int kSumBlocks = 512;

template <typename F>
__global__ void sum_squares_partial(const F* x, std::int64_t n, double* part) {
  __shared__ double warp_part[kThreads / 32];
  double s = 0;
  LOCKSTEP_GRID_LOOP(i, n) {
    const double v = Elem<F>::load(x[i]);
    s += v * v;
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int w = 0; w < kThreads / 32; ++w) t += warp_part[w];
    part[blockIdx.x] = t;
  }
}

// *out = the partials' sum (added to *out when `add`: 0 + t is t, so both give sum_squares' bits).
__global__ void sum_partials(const double* part, int n, double* out, bool add) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double t = 0;
    for (int i = 0; i < n; ++i) t += part[i];
    *out = add ? *out + t : t;
  }
}

// The sum of squares of x into *out (device memory), in a fixed order: partials per block, then
// one thread sums them.
template <typename F>
void launch_sum_squares(ComputeContext& ctx, const void* x, std::int64_t n, double* out, bool add) {
  cudaStream_t s = stream(ctx);
  const unsigned blocks = std::min<unsigned>(blocks_for(n), kSumBlocks);
  Scratch part(ctx, blocks * sizeof(double));
  sum_squares_partial<F><<<blocks, kThreads, 0, s>>>(static_cast<const F*>(x), n, part.as<double>());
  sum_partials<<<1, 32, 0, s>>>(part.as<double>(), static_cast<int>(blocks), out, add);
  check_launch("sum_squares");
}

template <typename F>
__global__ void clip_by_norms_kernel(const F* x, F* y, std::int64_t n, NormClip c, const double* global_sq,
                                     const double* own_sq) {
  const float scale = clip_math::clip_factor(c, global_sq, own_sq);
  const float clip = c.clipvalue;
  LOCKSTEP_GRID_LOOP(i, n) {
    const float v = Elem<F>::load(x[i]) * scale;  // scale_clip's expression: the same bits
    y[i] = Elem<F>::store(v < -clip ? -clip : v > clip ? clip : v);
  }
}

// The rules on one element: the one-variable kernels and the multi-tensor ones share them.
__device__ __forceinline__ void sgd_at(std::int64_t i, float* w, float* m, const float* g, float lr, float mu,
                                       bool nesterov) {
  if (!m) {
    w[i] -= lr * g[i];
  } else {
    const float mi = mu * m[i] - lr * g[i];
    m[i] = mi;
    w[i] += nesterov ? mu * mi - lr * g[i] : mi;
  }
}
__device__ __forceinline__ void adam_at(std::int64_t i, float* w, float* m, float* v, const float* g,
                                        const AdamStep& s, float alpha, float decay) {
  const float gi = g[i];
  const float wi = w[i] - w[i] * decay;
  const float mi = m[i] + (gi - m[i]) * s.one_minus_b1;
  const float vi = v[i] + (gi * gi - v[i]) * s.one_minus_b2;
  m[i] = mi;
  v[i] = vi;
  w[i] = wi - (mi * alpha) / (sqrtf(vi) + s.epsilon);
}

__global__ void sgd_kernel(float* w, float* m, const float* g, std::int64_t n, const StepBlock* step,
                           float mu, bool nesterov) {
  if (step->state.skipped) return;  // the same for every thread: the loss scale's check failed
  const float lr = step->scalars.lr;
  LOCKSTEP_GRID_LOOP(i, n) sgd_at(i, w, m, g, lr, mu, nesterov);
}

__global__ void adam_kernel(float* w, float* m, float* v, const float* g, std::int64_t n, AdamStep s,
                            const StepBlock* step) {
  if (step->state.skipped) return;
  const float alpha = step->scalars.alpha, decay = step->scalars.decay;
  LOCKSTEP_GRID_LOOP(i, n) adam_at(i, w, m, v, g, s, alpha, decay);
}

// Keras 3's RMSprop in its float32 order (the CPU kernel's expression: optimizer_kernels.cpp).
__device__ __forceinline__ void rmsprop_at(std::int64_t i, float* w, float* vel, float* mom, float* avg,
                                           const float* g, const RmspropStep& s, float lr) {
  const float gi = g[i];
  const float vi = s.rho * vel[i] + s.one_minus_rho * (gi * gi);
  vel[i] = vi;
  float d = vi + s.epsilon;
  if (avg) {
    const float ai = s.rho * avg[i] + s.one_minus_rho * gi;
    avg[i] = ai;
    d = (vi - ai * ai) + s.epsilon;
  }
  const float x = (lr * gi) / sqrtf(d);
  if (mom) {
    const float mi = s.momentum * mom[i] + x;
    mom[i] = mi;
    w[i] -= mi;
  } else {
    w[i] -= x;
  }
}

__global__ void rmsprop_kernel(float* w, float* vel, float* mom, float* avg, const float* g, std::int64_t n,
                               RmspropStep s, const StepBlock* step) {
  if (step->state.skipped) return;
  const float lr = step->scalars.lr;
  LOCKSTEP_GRID_LOOP(i, n) rmsprop_at(i, w, vel, mom, avg, g, s, lr);
}

// Multi-tensor apply: the grid's row y is variable y of the descriptor (a kernel parameter).
__global__ void sgd_multi_kernel(MultiUpdateDesc d, const StepBlock* step, float mu, bool nesterov) {
  if (step->state.skipped) return;
  const int j = static_cast<int>(blockIdx.y);
  float* w = static_cast<float*>(d.w[j]);
  float* m = static_cast<float*>(d.m[j]);
  const float* g = static_cast<const float*>(d.g[j]);
  const float lr = step->scalars.lr;
  LOCKSTEP_GRID_LOOP(i, d.n[j]) sgd_at(i, w, m, g, lr, mu, nesterov);
}

__global__ void adam_multi_kernel(MultiUpdateDesc d, AdamStep s, const StepBlock* step) {
  if (step->state.skipped) return;
  const int j = static_cast<int>(blockIdx.y);
  float* w = static_cast<float*>(d.w[j]);
  float* m = static_cast<float*>(d.m[j]);
  float* v = static_cast<float*>(d.v[j]);
  const float* g = static_cast<const float*>(d.g[j]);
  const float alpha = step->scalars.alpha, decay = step->scalars.decay;
  LOCKSTEP_GRID_LOOP(i, d.n[j]) adam_at(i, w, m, v, g, s, alpha, decay);
}

__global__ void rmsprop_multi_kernel(MultiUpdateDesc d, RmspropStep s, const StepBlock* step) {
  if (step->state.skipped) return;
  const int j = static_cast<int>(blockIdx.y);
  float* w = static_cast<float*>(d.w[j]);
  float* vel = static_cast<float*>(d.v[j]);
  float* mom = static_cast<float*>(d.m[j]);
  float* avg = static_cast<float*>(d.a[j]);
  const float* g = static_cast<const float*>(d.g[j]);
  const float lr = step->scalars.lr;
  LOCKSTEP_GRID_LOOP(i, d.n[j]) rmsprop_at(i, w, vel, mom, avg, g, s, lr);
}

// Blocks along x for the largest variable, one row of them per variable.
dim3 multi_grid(const MultiUpdateDesc& d) {
  std::int64_t most = 0;
  for (int j = 0; j < d.count; ++j) most = std::max(most, d.n[j]);
  return dim3(blocks_for(most), static_cast<unsigned>(d.count));
}

// One thread: the step before counted, the step's numbers from the count (step_state.hpp's rule).
__global__ void step_begin_kernel(StepBlock* block) { step_state::begin_step(*block); }
__global__ void step_rule_set_kernel(StepBlock* block, StepRule rule) { block->rule = rule; }
__global__ void step_set_kernel(StepBlock* block, std::int64_t iterations) { step_state::set_step(*block, iterations); }

// The loss scale kept in the block: loss_scale_math.hpp's rule and factors, on one thread.
__global__ void loss_scale_set_kernel(StepBlock* block, LossScaleState state) { block->loss_scale = state; }
// f * weight at every loss, as sum's backward gives it after scale's backward (f * weight,
// rounded once: a weight of 1 leaves f's bits), whatever the loss holds; loss null: one element.
__global__ void loss_seed_kernel(const float* loss, std::int64_t n, float factor, float weight,
                                 const StepBlock* block, double inverse_n, float* seed) {
  const float f = __fmul_rn(block ? loss_scale_math::loss_factor(inverse_n, block->loss_scale.scale) : factor, weight);
  if (!loss) {
    if (blockIdx.x == 0 && threadIdx.x == 0) seed[0] = f;
    return;
  }
  LOCKSTEP_GRID_LOOP(i, n) seed[i] = f;
}
__global__ void loss_scale_update_kernel(StepBlock* block, std::int64_t growth_steps) {
  step_state::update_loss_scale(*block, growth_steps);
}
// scale()'s expression, then the finite check of what was stored (the CPU kernel's bits): every
// thread that meets an infinite or NaN element stores the same 1, so the races write alike.
template <typename F>
__global__ void unscale_check_kernel(const F* x, F* y, std::int64_t n, StepBlock* block) {
  const float inverse = step_state::unscale_factor(*block);
  LOCKSTEP_GRID_LOOP(i, n) {
    const F v = Elem<F>::store(Elem<F>::load(x[i]) * inverse);
    y[i] = v;
    step_state::mark_not_finite(*block, Elem<F>::load(v));
  }
}
}  // namespace

template <typename F>
double sum_squares(ComputeContext& ctx, const void* x, std::int64_t n) {
  if (n == 0) return 0;
  Scratch sum(ctx, sizeof(double));
  launch_sum_squares<F>(ctx, x, n, sum.as<double>(), false);
  double host = 0;
  read_back(ctx, &host, sum.as<double>(), sizeof host);
  return host;
}

template <typename F>
void sum_squares_add(ComputeContext& ctx, const void* x, std::int64_t n, double* acc) {
  if (n == 0) return;  // adds 0: *acc unchanged
  launch_sum_squares<F>(ctx, x, n, acc, true);
}

template <typename F>
void clip_by_norms(ComputeContext& ctx, const void* x, void* y, std::int64_t n, const NormClip& c,
                   const double* global_sq, const double* own_sq) {
  if (n == 0) return;
  clip_by_norms_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<const F*>(x), static_cast<F*>(y),
                                                                       n, c, global_sq, own_sq);
  check_launch("clip_by_norms");
}

void sgd_update(ComputeContext& ctx, void* w, void* m, const void* g, std::int64_t n, const StepBlock* step,
                float momentum, bool nesterov) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<float*>(w), static_cast<float*>(m),
                                                         static_cast<const float*>(g), n, step, momentum, nesterov);
  check_launch("sgd_update");
}

void adam_update(ComputeContext& ctx, void* w, void* m, void* v, const void* g, std::int64_t n,
                 const AdamStep& s, const StepBlock* step) {
  if (n == 0) return;
  adam_kernel<<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<float*>(w), static_cast<float*>(m),
                                                          static_cast<float*>(v), static_cast<const float*>(g), n, s,
                                                          step);
  check_launch("adam_update");
}

void rmsprop_update(ComputeContext& ctx, void* w, void* velocity, void* momentum, void* average, const void* g,
                    std::int64_t n, const RmspropStep& s, const StepBlock* step) {
  if (n == 0) return;
  rmsprop_kernel<<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      static_cast<float*>(w), static_cast<float*>(velocity), static_cast<float*>(momentum),
      static_cast<float*>(average), static_cast<const float*>(g), n, s, step);
  check_launch("rmsprop_update");
}

void sgd_update_multi(ComputeContext& ctx, const MultiUpdateDesc& d, const StepBlock* step, float momentum,
                      bool nesterov) {
  if (d.count == 0) return;
  sgd_multi_kernel<<<multi_grid(d), kThreads, 0, stream(ctx)>>>(d, step, momentum, nesterov);
  check_launch("sgd_update_multi");
}

void adam_update_multi(ComputeContext& ctx, const MultiUpdateDesc& d, const AdamStep& s,
                       const StepBlock* step) {
  if (d.count == 0) return;
  adam_multi_kernel<<<multi_grid(d), kThreads, 0, stream(ctx)>>>(d, s, step);
  check_launch("adam_update_multi");
}

void rmsprop_update_multi(ComputeContext& ctx, const MultiUpdateDesc& d, const RmspropStep& s,
                          const StepBlock* step) {
  if (d.count == 0) return;
  rmsprop_multi_kernel<<<multi_grid(d), kThreads, 0, stream(ctx)>>>(d, s, step);
  check_launch("rmsprop_update_multi");
}

void step_begin(ComputeContext& ctx, StepBlock* block) {
  step_begin_kernel<<<1, 1, 0, stream(ctx)>>>(block);
  check_launch("step_begin");
}

void step_rule_set(ComputeContext& ctx, StepBlock* block, const StepRule& rule) {
  step_rule_set_kernel<<<1, 1, 0, stream(ctx)>>>(block, rule);
  check_launch("step_rule_set");
}

void step_set(ComputeContext& ctx, StepBlock* block, std::int64_t iterations) {
  step_set_kernel<<<1, 1, 0, stream(ctx)>>>(block, iterations);
  check_launch("step_set");
}

void loss_scale_set(ComputeContext& ctx, StepBlock* block, const LossScaleState& state) {
  loss_scale_set_kernel<<<1, 1, 0, stream(ctx)>>>(block, state);
  check_launch("loss_scale_set");
}

void loss_seed(ComputeContext& ctx, const void* loss, std::int64_t n, float factor, float weight,
               const StepBlock* block, double inverse_n, void* seed) {
  if (loss && n == 0) return;
  loss_seed_kernel<<<loss ? blocks_for(n) : 1, kThreads, 0, stream(ctx)>>>(
      static_cast<const float*>(loss), n, factor, weight, block, inverse_n, static_cast<float*>(seed));
  check_launch("loss_seed");
}

void loss_scale_update(ComputeContext& ctx, StepBlock* block, std::int64_t growth_steps) {
  loss_scale_update_kernel<<<1, 1, 0, stream(ctx)>>>(block, growth_steps);
  check_launch("loss_scale_update");
}

template <typename F>
void unscale_check(ComputeContext& ctx, const void* x, void* y, std::int64_t n, StepBlock* block) {
  if (n == 0) return;
  unscale_check_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(static_cast<const F*>(x), static_cast<F*>(y),
                                                                       n, block);
  check_launch("unscale_check");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, sum_squares)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, sum_squares_add)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, clip_by_norms)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, unscale_check)

}  // namespace lockstep::backend::cuda
