#include "lockstep/tensor/ops_random.hpp"

#include "tensor/op_util.hpp"

namespace lockstep {

namespace {
// A tensor of `shape` seen as (rows, numel / rows), each unit drawn by random_fill on the current
// device.
Tensor random_fill(const char* op, const Shape& shape, DType dtype, backend::RandomDistribution distribution,
                   const DropoutKey& key) {
  LOCKSTEP_CHECK(is_floating(dtype), op, ": draws float32, float16 or bfloat16 values, not ", dtype_name(dtype));
  Tensor out = Tensor::empty(shape, dtype);
  const auto& kt = detail::kern(op, out, backend::KernelOp::kRandomFill);
  // Every call draws (a rate of 1 to the check): a host step is refused by a watching capture check.
  const std::int64_t* step_at = detail::dropout_step_at(op, backend::KernelOp::kRandomFill, key, 1.0f, out);
  const std::int64_t rows = out.rank() ? out.dim(0) : 1, cols = rows ? out.numel() / rows : 0;
  kt.random_fill(detail::ctx(), out.raw_data(), rows, cols, distribution, key.seed, key.stream, key.step, step_at,
                 key.first_example);
  return out;
}
}  // namespace

Tensor standard_normal(const Shape& shape, DType dtype, const DropoutKey& key) {
  return random_fill("standard_normal", shape, dtype, backend::RandomDistribution::kStandardNormal, key);
}

Tensor uniform(const Shape& shape, DType dtype, const DropoutKey& key) {
  return random_fill("uniform", shape, dtype, backend::RandomDistribution::kUniform, key);
}

Tensor standard_normal_like(const Tensor& x, const DropoutKey& key) {
  detail::check_float("standard_normal_like", {&x});
  return random_fill("standard_normal_like", x.shape(), x.dtype(), backend::RandomDistribution::kStandardNormal, key);
}

Tensor uniform_like(const Tensor& x, const DropoutKey& key) {
  detail::check_float("uniform_like", {&x});
  return random_fill("uniform_like", x.shape(), x.dtype(), backend::RandomDistribution::kUniform, key);
}

}  // namespace lockstep
