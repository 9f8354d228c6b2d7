// BatchNormalization's fused passes (backend kernels batch_norm_reduce / _apply / _backward) and
// LayerNormalization's (layer_norm / _backward).
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
// x is (rows, channels), dy (when given) x's shape, each of `channel` (channels,) (an undefined
// one is left out: an absent gamma or beta) and each of `row` (rows,), all of one floating dtype
// on x's device kind (the kernels are float32's: another dtype is the missing-kernel error); none
// may be recorded (the layer records the gradient of the whole normalisation).
std::int64_t check_batch_norm(const char* op, const Tensor& x, const Tensor* dy,
                              std::initializer_list<const Tensor*> channel,
                              std::initializer_list<const Tensor*> row = {}) {
  LOCKSTEP_CHECK(x.defined() && x.rank() == 2, op, ": x must be (rows, channels), got ",
                 x.defined() ? x.shape().str() : std::string("undefined"));
  const std::int64_t c = x.dim(1);
  for (const Tensor* t : channel) {
    if (!t->defined()) continue;
    detail::check_float(op, {&x, t});
    LOCKSTEP_CHECK(t->rank() == 1 && t->dim(0) == c, op, ": a per-channel argument is ", t->shape().str(),
                   " but x has ", c, " channels");
  }
  for (const Tensor* t : row) {
    detail::check_float(op, {&x, t});
    LOCKSTEP_CHECK(t->rank() == 1 && t->dim(0) == x.dim(0), op, ": a per-row argument is ", t->shape().str(),
                   " but x has ", x.dim(0), " rows");
  }
  std::vector<const Tensor*> all{&x};
  if (dy) {
    detail::check_float(op, {&x, dy});
    LOCKSTEP_CHECK(dy->shape() == x.shape(), op, ": dy ", dy->shape().str(), " does not match x ", x.shape().str());
    all.push_back(dy);
  }
  for (const Tensor* t : channel)
    if (t->defined()) all.push_back(t);
  all.insert(all.end(), row.begin(), row.end());
  LOCKSTEP_CHECK(!(current_recorder() && current_recorder()->wants(all.data(), static_cast<int>(all.size()))), op,
                 ": has no gradient of its own, and a tape records its inputs; record the gradient of the whole "
                 "normalisation (record_custom), as BatchNormalization and LayerNormalization do");
  return c;
}
}  // namespace

Tensor batch_norm_squared_deviations(const Tensor& x, const Tensor& mean) {
  constexpr const char* kName = "batch_norm_squared_deviations";
  const std::int64_t c = check_batch_norm(kName, x, nullptr, {&mean});
  Tensor out = Tensor::empty({c}, x.dtype());
  kern(kName, x, backend::KernelOp::kBatchNormReduce)
      .batch_norm_reduce(ctx(), x.raw_data(), mean.raw_data(), nullptr, nullptr, out.raw_data(), x.dim(0), c);
  return out;
}

Tensor batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& scale, const Tensor& offset) {
  constexpr const char* kName = "batch_norm_apply";
  const std::int64_t c = offset.defined() ? check_batch_norm(kName, x, nullptr, {&mean, &scale, &offset})
                                          : check_batch_norm(kName, x, nullptr, {&mean, &scale});
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  kern(kName, x, backend::KernelOp::kBatchNormApply)
      .batch_norm_apply(ctx(), x.raw_data(), mean.raw_data(), scale.raw_data(),
                        offset.defined() ? offset.raw_data() : nullptr, y.raw_data(), x.dim(0), c);
  return y;
}

std::array<Tensor, 2> batch_norm_grad_sums(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                           const Tensor& inv_std) {
  constexpr const char* kName = "batch_norm_grad_sums";
  const std::int64_t c = check_batch_norm(kName, x, &dy, {&mean, &inv_std});
  Tensor out = Tensor::empty({2, c}, x.dtype());
  kern(kName, x, backend::KernelOp::kBatchNormReduce)
      .batch_norm_reduce(ctx(), x.raw_data(), mean.raw_data(), dy.raw_data(), inv_std.raw_data(), out.raw_data(),
                         x.dim(0), c);
  return {out.slice(0, 1).reshape({c}), out.slice(1, 2).reshape({c})};
}

Tensor batch_norm_input_grad(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& inv_std,
                             const Tensor& scale, const Tensor& mean_dy, const Tensor& mean_dy_xhat) {
  constexpr const char* kName = "batch_norm_input_grad";
  const std::int64_t c = check_batch_norm(kName, x, &dy, {&mean, &inv_std, &scale, &mean_dy, &mean_dy_xhat});
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  kern(kName, x, backend::KernelOp::kBatchNormBackward)
      .batch_norm_backward(ctx(), dy.raw_data(), x.raw_data(), mean.raw_data(), inv_std.raw_data(), scale.raw_data(),
                           mean_dy.raw_data(), mean_dy_xhat.raw_data(), dx.raw_data(), x.dim(0), c);
  return dx;
}

std::array<Tensor, 3> layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon) {
  constexpr const char* kName = "layer_norm";
  const std::int64_t c = check_batch_norm(kName, x, nullptr, {&gamma, &beta});
  LOCKSTEP_CHECK(epsilon > 0.0f, kName, ": epsilon must be positive, got ", epsilon);
  Tensor y = Tensor::empty(x.shape(), x.dtype()), mean = Tensor::empty({x.dim(0)}, x.dtype()),
         inv_std = Tensor::empty({x.dim(0)}, x.dtype());
  kern(kName, x, backend::KernelOp::kLayerNorm)
      .layer_norm(ctx(), x.raw_data(), gamma.defined() ? gamma.raw_data() : nullptr,
                  beta.defined() ? beta.raw_data() : nullptr, y.raw_data(), mean.raw_data(), inv_std.raw_data(),
                  x.dim(0), c, epsilon);
  return {y, mean, inv_std};
}

Tensor layer_norm_input_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                             const Tensor& inv_std) {
  constexpr const char* kName = "layer_norm_input_grad";
  const std::int64_t c = check_batch_norm(kName, x, &dy, {&gamma}, {&mean, &inv_std});
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  kern(kName, x, backend::KernelOp::kLayerNormBackward)
      .layer_norm_backward(ctx(), x.raw_data(), gamma.defined() ? gamma.raw_data() : nullptr, dy.raw_data(),
                           mean.raw_data(), inv_std.raw_data(), dx.raw_data(), x.dim(0), c);
  return dx;
}

}  // namespace lockstep
