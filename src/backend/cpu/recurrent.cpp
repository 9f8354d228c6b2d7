// Recurrent cells: one LSTM or GRU step forward and backward (kernel_ops.def's lstm_cell and
// gru_cell rows). A step of the composed ops was some twenty ops, each a pass over a few hundred
// values and a tape record; this is one pass each way.
#include <cmath>

#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
// The unary kernels' sigmoid and tanh (elementwise.cpp), so a fused step has the composed ops' bits.
inline float sigmoid_of(float v) { return 1.0f / (1.0f + std::exp(-v)); }
// A value as the storage type T keeps it: each composed op stores its result as T.
template <typename T>
inline float as_stored(float v) {
  return Elem<T>::load(Elem<T>::store(v));
}
}  // namespace

template <typename T>
void lstm_cell(ComputeContext& ctx, const void* av, const void* bv, const void* c_prev_v, std::int64_t batch,
               std::int64_t units, void* hc_v, void* gates_v) {
  using E = Elem<T>;
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  const T* c_prev = static_cast<const T*>(c_prev_v);
  T* h = static_cast<T*>(hc_v);
  T* c = h + batch * units;
  T* gates = static_cast<T*>(gates_v);
  const std::int64_t u = units, w = 4 * units;
  parallel_rows(ctx, batch, 40 * w, [=](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* ar = a + r * w;
      const T* br = b + r * w;
      T* gr = gates + r * w;
      for (std::int64_t j = 0; j < u; ++j) {
        const auto z = [&](int gate) { return as_stored<T>(E::load(ar[gate * u + j]) + E::load(br[gate * u + j])); };
        const float i = as_stored<T>(sigmoid_of(z(0))), f = as_stored<T>(sigmoid_of(z(1)));
        const float g = as_stored<T>(std::tanh(z(2))), o = as_stored<T>(sigmoid_of(z(3)));
        const float kept = as_stored<T>(f * E::load(c_prev[r * u + j])), added = as_stored<T>(i * g);
        const float cv = as_stored<T>(kept + added);
        const float t = as_stored<T>(std::tanh(cv));
        gr[j] = E::store(i);
        gr[u + j] = E::store(f);
        gr[2 * u + j] = E::store(g);
        gr[3 * u + j] = E::store(o);
        c[r * u + j] = E::store(cv);
        h[r * u + j] = E::store(o * t);
      }
    }
  });
}

template <typename T>
void lstm_cell_backward(ComputeContext& ctx, const void* dhc_v, const void* gates_v, const void* c_prev_v,
                        const void* hc_v, std::int64_t batch, std::int64_t units, void* dz_v, void* dc_prev_v) {
  using E = Elem<T>;
  const T* dh = static_cast<const T*>(dhc_v);
  const T* dc = dh + batch * units;
  const T* gates = static_cast<const T*>(gates_v);
  const T* c_prev = static_cast<const T*>(c_prev_v);
  const T* c = static_cast<const T*>(hc_v) + batch * units;
  T* dz = static_cast<T*>(dz_v);
  T* dc_prev = static_cast<T*>(dc_prev_v);
  const std::int64_t u = units, w = 4 * units;
  parallel_rows(ctx, batch, 40 * w, [=](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* gr = gates + r * w;
      T* dzr = dz + r * w;
      for (std::int64_t j = 0; j < u; ++j) {
        const std::int64_t k = r * u + j;
        const float i = E::load(gr[j]), f = E::load(gr[u + j]), g = E::load(gr[2 * u + j]), o = E::load(gr[3 * u + j]);
        const float t = std::tanh(E::load(c[k])), dhv = E::load(dh[k]);
        const float dct = E::load(dc[k]) + dhv * o * (1.0f - t * t);
        dzr[j] = E::store(dct * g * i * (1.0f - i));
        dzr[u + j] = E::store(dct * E::load(c_prev[k]) * f * (1.0f - f));
        dzr[2 * u + j] = E::store(dct * i * (1.0f - g * g));
        dzr[3 * u + j] = E::store(dhv * t * o * (1.0f - o));
        dc_prev[k] = E::store(dct * f);
      }
    }
  });
}

template <typename T>
void gru_cell(ComputeContext& ctx, const void* xv, const void* inner_v, const void* h_prev_v, std::int64_t batch,
              std::int64_t units, void* h_v, void* gates_v) {
  using E = Elem<T>;
  const T* x = static_cast<const T*>(xv);
  const T* inner = static_cast<const T*>(inner_v);
  const T* h_prev = static_cast<const T*>(h_prev_v);
  T* h = static_cast<T*>(h_v);
  T* gates = static_cast<T*>(gates_v);
  const std::int64_t u = units, w = 3 * units;
  parallel_rows(ctx, batch, 30 * w, [=](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * w;
      const T* ir = inner + r * w;
      T* gr = gates + r * w;
      for (std::int64_t j = 0; j < u; ++j) {
        const float z = as_stored<T>(sigmoid_of(as_stored<T>(E::load(xr[j]) + E::load(ir[j]))));
        const float rg = as_stored<T>(sigmoid_of(as_stored<T>(E::load(xr[u + j]) + E::load(ir[u + j]))));
        const float rh = as_stored<T>(rg * E::load(ir[2 * u + j]));
        const float hh = as_stored<T>(std::tanh(as_stored<T>(E::load(xr[2 * u + j]) + rh)));
        const float hp = E::load(h_prev[r * u + j]);
        const float kept = as_stored<T>(z * hp), one_minus_z = as_stored<T>(-z + 1.0f);
        const float added = as_stored<T>(one_minus_z * hh);
        gr[j] = E::store(z);
        gr[u + j] = E::store(rg);
        gr[2 * u + j] = E::store(hh);
        h[r * u + j] = E::store(kept + added);
      }
    }
  });
}

template <typename T>
void gru_cell_backward(ComputeContext& ctx, const void* dh_v, const void* gates_v, const void* inner_v,
                       const void* h_prev_v, std::int64_t batch, std::int64_t units, void* dx_v, void* dinner_v,
                       void* dh_prev_v) {
  using E = Elem<T>;
  const T* dh = static_cast<const T*>(dh_v);
  const T* gates = static_cast<const T*>(gates_v);
  const T* inner = static_cast<const T*>(inner_v);
  const T* h_prev = static_cast<const T*>(h_prev_v);
  T* dx = static_cast<T*>(dx_v);
  T* dinner = static_cast<T*>(dinner_v);
  T* dh_prev = static_cast<T*>(dh_prev_v);
  const std::int64_t u = units, w = 3 * units;
  parallel_rows(ctx, batch, 30 * w, [=](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* gr = gates + r * w;
      for (std::int64_t j = 0; j < u; ++j) {
        const std::int64_t k = r * u + j;
        const float z = E::load(gr[j]), rg = E::load(gr[u + j]), hh = E::load(gr[2 * u + j]);
        const float d = E::load(dh[k]), hp = E::load(h_prev[k]), inner_h = E::load(inner[r * w + 2 * u + j]);
        const float dpre_h = d * (1.0f - z) * (1.0f - hh * hh);  // through hh = tanh(x_h + r inner_h)
        const float dz = d * (hp - hh) * z * (1.0f - z);
        const float dr = dpre_h * inner_h * rg * (1.0f - rg);
        dx[r * w + j] = E::store(dz);
        dx[r * w + u + j] = E::store(dr);
        dx[r * w + 2 * u + j] = E::store(dpre_h);
        dinner[r * w + j] = E::store(dz);
        dinner[r * w + u + j] = E::store(dr);
        dinner[r * w + 2 * u + j] = E::store(dpre_h * rg);
        dh_prev[k] = E::store(d * z);
      }
    }
  });
}

LOCKSTEP_INSTANTIATE_KERNEL(Floating, lstm_cell)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, lstm_cell_backward)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, gru_cell)
LOCKSTEP_INSTANTIATE_KERNEL(Floating, gru_cell_backward)

}  // namespace lockstep::backend::cpu
