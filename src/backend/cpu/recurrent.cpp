// Recurrent cells: one LSTM or GRU step forward and backward (kernel_ops.def's lstm_cell and
// gru_cell rows). A step of the composed ops was some twenty ops, each a pass over a few hundred
// values and a tape record; this is one pass each way.
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/cpu_kernels.hpp"

namespace lockstep::backend::cpu {

namespace {
// A value as the storage type T keeps it: each composed op stores its result as T.
template <typename T>
inline float as_stored(float v) {
  return Elem<T>::load(Elem<T>::store(v));
}
// fn (sigmoid_floats or tanh_floats: the unary kernels' own) over n values, each result as T keeps it.
template <typename T>
void activate(void (*fn)(const float*, float*, std::int64_t), const float* x, float* y, std::int64_t n) {
  fn(x, y, n);
  for (std::int64_t k = 0; k < n; ++k) y[k] = as_stored<T>(y[k]);
}
// A row's scratch floats, per thread: grown once, then reused by every step.
float* scratch(std::int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<std::int64_t>(buf.size()) < n) buf.resize(static_cast<std::size_t>(n));
  return buf.data();
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
  parallel_rows(ctx, batch, 20 * w, [=](std::int64_t r0, std::int64_t r1) {
    float* z = scratch(3 * w);  // z, then the gates i, f, g, o, then c and tanh(c)
    float* act = z + w;
    float* cv = act + w;
    float* t = cv + u;
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::int64_t k = 0; k < w; ++k) z[k] = as_stored<T>(E::load(a[r * w + k]) + E::load(b[r * w + k]));
      activate<T>(sigmoid_floats, z, act, 2 * u);  // i, f
      activate<T>(tanh_floats, z + 2 * u, act + 2 * u, u);
      activate<T>(sigmoid_floats, z + 3 * u, act + 3 * u, u);  // o
      for (std::int64_t j = 0; j < u; ++j) {
        const float kept = as_stored<T>(act[u + j] * E::load(c_prev[r * u + j]));
        const float added = as_stored<T>(act[j] * act[2 * u + j]);
        cv[j] = as_stored<T>(kept + added);
      }
      activate<T>(tanh_floats, cv, t, u);
      for (std::int64_t k = 0; k < w; ++k) gates[r * w + k] = E::store(act[k]);
      for (std::int64_t j = 0; j < u; ++j) {
        c[r * u + j] = E::store(cv[j]);
        h[r * u + j] = E::store(act[3 * u + j] * t[j]);
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
  parallel_rows(ctx, batch, 20 * w, [=](std::int64_t r0, std::int64_t r1) {
    float* cv = scratch(2 * u);
    float* t = cv + u;
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* gr = gates + r * w;
      T* dzr = dz + r * w;
      for (std::int64_t j = 0; j < u; ++j) cv[j] = E::load(c[r * u + j]);
      tanh_floats(cv, t, u);
      for (std::int64_t j = 0; j < u; ++j) {
        const std::int64_t k = r * u + j;
        const float i = E::load(gr[j]), f = E::load(gr[u + j]), g = E::load(gr[2 * u + j]), o = E::load(gr[3 * u + j]);
        const float dhv = E::load(dh[k]);
        const float dct = E::load(dc[k]) + dhv * o * (1.0f - t[j] * t[j]);
        dzr[j] = E::store(dct * g * i * (1.0f - i));
        dzr[u + j] = E::store(dct * E::load(c_prev[k]) * f * (1.0f - f));
        dzr[2 * u + j] = E::store(dct * i * (1.0f - g * g));
        dzr[3 * u + j] = E::store(dhv * t[j] * o * (1.0f - o));
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
  parallel_rows(ctx, batch, 20 * w, [=](std::int64_t r0, std::int64_t r1) {
    float* pre = scratch(2 * w);  // z and r's arguments, then the candidate's; then z, r, hh
    float* act = pre + w;
    for (std::int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * w;
      const T* ir = inner + r * w;
      for (std::int64_t k = 0; k < 2 * u; ++k) pre[k] = as_stored<T>(E::load(xr[k]) + E::load(ir[k]));
      activate<T>(sigmoid_floats, pre, act, 2 * u);  // z, r
      for (std::int64_t j = 0; j < u; ++j) {
        const float rh = as_stored<T>(act[u + j] * E::load(ir[2 * u + j]));
        pre[2 * u + j] = as_stored<T>(E::load(xr[2 * u + j]) + rh);
      }
      activate<T>(tanh_floats, pre + 2 * u, act + 2 * u, u);  // hh
      for (std::int64_t j = 0; j < u; ++j) {
        const float zg = act[j], hh = act[2 * u + j];
        const float kept = as_stored<T>(zg * E::load(h_prev[r * u + j])), one_minus_z = as_stored<T>(-zg + 1.0f);
        const float added = as_stored<T>(one_minus_z * hh);
        h[r * u + j] = E::store(kept + added);
      }
      for (std::int64_t k = 0; k < w; ++k) gates[r * w + k] = E::store(act[k]);
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
  parallel_rows(ctx, batch, 10 * w, [=](std::int64_t r0, std::int64_t r1) {
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
