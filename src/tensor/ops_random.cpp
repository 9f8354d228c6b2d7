#include "lockstep/tensor/ops_random.hpp"

#include "tensor/op_util.hpp"

namespace lockstep {

namespace {
// x's shape seen as (rows, numel / rows), each unit drawn by random_fill on the current device.
Tensor random_like(const char* op, const Tensor& x, backend::RandomDistribution distribution, const DropoutKey& key) {
  detail::check_float(op, {&x});
  const auto& kt = detail::kern(op, x, backend::KernelOp::kRandomFill);
  // Every call draws (a rate of 1 to the check): a host step is refused by a watching capture check.
  const std::int64_t* step_at = detail::dropout_step_at(op, backend::KernelOp::kRandomFill, key, 1.0f, x);
  const std::int64_t rows = x.rank() ? x.dim(0) : 1, cols = rows ? x.numel() / rows : 0;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  kt.random_fill(detail::ctx(), out.raw_data(), rows, cols, distribution, key.seed, key.stream, key.step, step_at,
                 key.first_example);
  return out;
}
}  // namespace

Tensor standard_normal_like(const Tensor& x, const DropoutKey& key) {
  return random_like("standard_normal_like", x, backend::RandomDistribution::kStandardNormal, key);
}

Tensor uniform_like(const Tensor& x, const DropoutKey& key) {
  return random_like("uniform_like", x, backend::RandomDistribution::kUniform, key);
}

}  // namespace lockstep
