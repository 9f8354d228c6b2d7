// BatchNormalization's fused passes (backend kernels batch_norm_reduce / _apply / _backward).
#include "tensor/op_util.hpp"

namespace lockstep {

using detail::ctx;
using detail::kern;

namespace {
// x is (rows, channels), dy (when given) x's shape and each of `channel` is (channels,), all of
// one floating dtype on x's device kind (the kernels are float32's: another dtype is the
// missing-kernel error); none may be recorded (the layer records the gradient of the whole
// normalisation).
std::int64_t check_batch_norm(const char* op, const Tensor& x, const Tensor* dy,
                              std::initializer_list<const Tensor*> channel) {
  LOCKSTEP_CHECK(x.defined() && x.rank() == 2, op, ": x must be (rows, channels), got ",
                 x.defined() ? x.shape().str() : std::string("undefined"));
  const std::int64_t c = x.dim(1);
  for (const Tensor* t : channel) {
    detail::check_float(op, {&x, t});
    LOCKSTEP_CHECK(t->rank() == 1 && t->dim(0) == c, op, ": a per-channel argument is ", t->shape().str(),
                   " but x has ", c, " channels");
  }
  std::vector<const Tensor*> all{&x};
  if (dy) {
    detail::check_float(op, {&x, dy});
    LOCKSTEP_CHECK(dy->shape() == x.shape(), op, ": dy ", dy->shape().str(), " does not match x ", x.shape().str());
    all.push_back(dy);
  }
  all.insert(all.end(), channel.begin(), channel.end());
  LOCKSTEP_CHECK(!(current_recorder() && current_recorder()->wants(all.data(), static_cast<int>(all.size()))), op,
                 ": has no gradient of its own, and a tape records its inputs; record the gradient of the whole "
                 "normalisation (record_custom), as BatchNormalization does");
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

}  // namespace lockstep
