// Recurrent cells: one LSTM or GRU step forward and backward (kernel_ops.def's lstm_cell and
// gru_cell rows), one thread per (row, unit). The forward's float operations are the composed
// ops' (the unary kernels' sigmoid and tanh, each result stored as the storage type, no
// contraction into FMAs: __fmul_rn / __fadd_rn), so a fused step has their bits here too.
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_kernels.hpp"

namespace lockstep::backend::cuda {

namespace {
__device__ inline float sigmoid_of(float v) { return 1.0f / (1.0f + expf(-v)); }
template <typename F>
__device__ inline float as_stored(float v) {
  return Elem<F>::load(Elem<F>::store(v));
}

template <typename F>
__global__ void lstm_cell_kernel(const F* a, const F* b, const F* c_prev, std::int64_t batch, std::int64_t u, F* h,
                                 F* c, F* gates) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(k, batch * u) {
    const std::int64_t r = k / u, j = k % u, at = r * 4 * u + j;
    const float zi = as_stored<F>(__fadd_rn(E::load(a[at]), E::load(b[at])));
    const float zf = as_stored<F>(__fadd_rn(E::load(a[at + u]), E::load(b[at + u])));
    const float zc = as_stored<F>(__fadd_rn(E::load(a[at + 2 * u]), E::load(b[at + 2 * u])));
    const float zo = as_stored<F>(__fadd_rn(E::load(a[at + 3 * u]), E::load(b[at + 3 * u])));
    const float i = as_stored<F>(sigmoid_of(zi)), f = as_stored<F>(sigmoid_of(zf));
    const float g = as_stored<F>(tanhf(zc)), o = as_stored<F>(sigmoid_of(zo));
    const float kept = as_stored<F>(__fmul_rn(f, E::load(c_prev[k]))), added = as_stored<F>(__fmul_rn(i, g));
    const float cv = as_stored<F>(__fadd_rn(kept, added));
    const float t = as_stored<F>(tanhf(cv));
    gates[at] = E::store(i);
    gates[at + u] = E::store(f);
    gates[at + 2 * u] = E::store(g);
    gates[at + 3 * u] = E::store(o);
    c[k] = E::store(cv);
    h[k] = E::store(__fmul_rn(o, t));
  }
}

template <typename F>
__global__ void lstm_cell_backward_kernel(const F* dh, const F* dc, const F* gates, const F* c_prev, const F* c,
                                          std::int64_t batch, std::int64_t u, F* dz, F* dc_prev) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(k, batch * u) {
    const std::int64_t r = k / u, j = k % u, at = r * 4 * u + j;
    const float i = E::load(gates[at]), f = E::load(gates[at + u]), g = E::load(gates[at + 2 * u]),
                o = E::load(gates[at + 3 * u]);
    const float t = tanhf(E::load(c[k])), dhv = E::load(dh[k]);
    const float dct = E::load(dc[k]) + dhv * o * (1.0f - t * t);
    dz[at] = E::store(dct * g * i * (1.0f - i));
    dz[at + u] = E::store(dct * E::load(c_prev[k]) * f * (1.0f - f));
    dz[at + 2 * u] = E::store(dct * i * (1.0f - g * g));
    dz[at + 3 * u] = E::store(dhv * t * o * (1.0f - o));
    dc_prev[k] = E::store(dct * f);
  }
}

template <typename F>
__global__ void gru_cell_kernel(const F* x, const F* inner, const F* h_prev, std::int64_t batch, std::int64_t u, F* h,
                                F* gates) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(k, batch * u) {
    const std::int64_t r = k / u, j = k % u, at = r * 3 * u + j;
    const float z = as_stored<F>(sigmoid_of(as_stored<F>(__fadd_rn(E::load(x[at]), E::load(inner[at])))));
    const float rg = as_stored<F>(sigmoid_of(as_stored<F>(__fadd_rn(E::load(x[at + u]), E::load(inner[at + u])))));
    const float rh = as_stored<F>(__fmul_rn(rg, E::load(inner[at + 2 * u])));
    const float hh = as_stored<F>(tanhf(as_stored<F>(__fadd_rn(E::load(x[at + 2 * u]), rh))));
    const float kept = as_stored<F>(__fmul_rn(z, E::load(h_prev[k]))), one_minus_z = as_stored<F>(__fadd_rn(-z, 1.0f));
    const float added = as_stored<F>(__fmul_rn(one_minus_z, hh));
    gates[at] = E::store(z);
    gates[at + u] = E::store(rg);
    gates[at + 2 * u] = E::store(hh);
    h[k] = E::store(__fadd_rn(kept, added));
  }
}

template <typename F>
__global__ void gru_cell_backward_kernel(const F* dh, const F* gates, const F* inner, const F* h_prev,
                                         std::int64_t batch, std::int64_t u, F* dx, F* dinner, F* dh_prev) {
  using E = Elem<F>;
  LOCKSTEP_GRID_LOOP(k, batch * u) {
    const std::int64_t r = k / u, j = k % u, at = r * 3 * u + j;
    const float z = E::load(gates[at]), rg = E::load(gates[at + u]), hh = E::load(gates[at + 2 * u]);
    const float d = E::load(dh[k]), hp = E::load(h_prev[k]), inner_h = E::load(inner[at + 2 * u]);
    const float dpre_h = d * (1.0f - z) * (1.0f - hh * hh);
    const float dz = d * (hp - hh) * z * (1.0f - z);
    const float dr = dpre_h * inner_h * rg * (1.0f - rg);
    dx[at] = E::store(dz);
    dx[at + u] = E::store(dr);
    dx[at + 2 * u] = E::store(dpre_h);
    dinner[at] = E::store(dz);
    dinner[at + u] = E::store(dr);
    dinner[at + 2 * u] = E::store(dpre_h * rg);
    dh_prev[k] = E::store(d * z);
  }
}
}  // namespace

template <typename F>
void lstm_cell(ComputeContext& ctx, const void* a, const void* b, const void* c_prev, std::int64_t batch,
               std::int64_t units, void* hc, void* gates) {
  const std::int64_t n = batch * units;
  if (n == 0) return;
  F* h = static_cast<F*>(hc);
  lstm_cell_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      static_cast<const F*>(a), static_cast<const F*>(b), static_cast<const F*>(c_prev), batch, units, h, h + n,
      static_cast<F*>(gates));
  check_launch("lstm_cell");
}

template <typename F>
void lstm_cell_backward(ComputeContext& ctx, const void* dhc, const void* gates, const void* c_prev, const void* hc,
                        std::int64_t batch, std::int64_t units, void* dz, void* dc_prev) {
  const std::int64_t n = batch * units;
  if (n == 0) return;
  const F* d = static_cast<const F*>(dhc);
  lstm_cell_backward_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      d, d + n, static_cast<const F*>(gates), static_cast<const F*>(c_prev), static_cast<const F*>(hc) + n, batch,
      units, static_cast<F*>(dz), static_cast<F*>(dc_prev));
  check_launch("lstm_cell_backward");
}

template <typename F>
void gru_cell(ComputeContext& ctx, const void* x, const void* inner, const void* h_prev, std::int64_t batch,
              std::int64_t units, void* h, void* gates) {
  const std::int64_t n = batch * units;
  if (n == 0) return;
  gru_cell_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      static_cast<const F*>(x), static_cast<const F*>(inner), static_cast<const F*>(h_prev), batch, units,
      static_cast<F*>(h), static_cast<F*>(gates));
  check_launch("gru_cell");
}

template <typename F>
void gru_cell_backward(ComputeContext& ctx, const void* dh, const void* gates, const void* inner, const void* h_prev,
                       std::int64_t batch, std::int64_t units, void* dx, void* dinner, void* dh_prev) {
  const std::int64_t n = batch * units;
  if (n == 0) return;
  gru_cell_backward_kernel<F><<<blocks_for(n), kThreads, 0, stream(ctx)>>>(
      static_cast<const F*>(dh), static_cast<const F*>(gates), static_cast<const F*>(inner),
      static_cast<const F*>(h_prev), batch, units, static_cast<F*>(dx), static_cast<F*>(dinner),
      static_cast<F*>(dh_prev));
  check_launch("gru_cell_backward");
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, lstm_cell)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, lstm_cell_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, gru_cell)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, gru_cell_backward)

}  // namespace lockstep::backend::cuda
