// Optimizer updates as fused in-place ops.
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
void check_slot(const char* op, const Tensor& w, const Tensor& t, const char* what) {
  LOCKSTEP_CHECK(t.defined() && t.dtype() == w.dtype() && t.numel() == w.numel() &&
                     t.device().kind == w.device().kind,
                 op, ": ", what, " ", t.defined() ? t.shape().str() : "undefined", " ",
                 t.defined() ? dtype_name(t.dtype()) : "", " does not match the variable ", w.shape().str(), " ",
                 dtype_name(w.dtype()));
}
}  // namespace

double sum_squares(const Tensor& a) {
  detail::check_float("sum_squares", {&a});
  return kern("sum_squares", a, backend::KernelOp::kSumSquares).sum_squares(ctx(), a.raw_data(), a.numel());
}

Tensor scale_and_clip(const Tensor& a, float scale, float clip) {
  detail::check_float("scale_and_clip", {&a});
  const auto& k = kern("scale_and_clip", a, backend::KernelOp::kScaleClip);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  k.scale_clip(ctx(), a.raw_data(), out.raw_data(), a.numel(), scale, clip);
  return out;
}

void sgd_update_(Tensor& w, Tensor& momentum, const Tensor& g, float lr, float mu, bool nesterov) {
  const auto& k = kern("SGD", w, backend::KernelOp::kSgdUpdate);
  check_slot("SGD", w, g, "gradient");
  if (momentum.defined()) check_slot("SGD", w, momentum, "momentum");
  k.sgd_update(ctx(), w.raw_data(), momentum.defined() ? momentum.raw_data() : nullptr, g.raw_data(), w.numel(), lr,
               mu, nesterov);
}

void adam_update_(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, const AdamConstants& c) {
  const auto& k = kern("Adam", w, backend::KernelOp::kAdamUpdate);
  check_slot("Adam", w, g, "gradient");
  check_slot("Adam", w, m, "first moment");
  check_slot("Adam", w, v, "second moment");
  const backend::AdamStep s{.alpha = c.alpha,
                            .one_minus_b1 = c.one_minus_beta_1,
                            .one_minus_b2 = c.one_minus_beta_2,
                            .epsilon = c.epsilon,
                            .decay = c.decay};
  k.adam_update(ctx(), w.raw_data(), m.raw_data(), v.raw_data(), g.raw_data(), w.numel(), s);
}

}  // namespace lockstep
