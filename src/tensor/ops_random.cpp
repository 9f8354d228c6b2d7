#include "lockstep/tensor/ops_random.hpp"

#include <cmath>
#include <numbers>
#include <vector>

#include "backend/dropout_rng.hpp"
#include "lockstep/tensor/step_capture.hpp"
#include "tensor/op_util.hpp"

namespace lockstep {

Tensor standard_normal_like(const Tensor& x, const DropoutKey& key) {
  detail::check_float("standard_normal_like", {&x});
  if (StepCaptureCheck* check = current_step_capture_check()) [[unlikely]]
    check->block("the op 'standard_normal_like' (Keras' GaussianNoise and GaussianDropout) draws its noise on the "
                 "host with the step as a host value, which a replay would freeze");
  namespace rng = backend::dropout;
  const std::int64_t rows = x.rank() ? x.dim(0) : 1, cols = rows ? x.numel() / rows : 0;
  std::vector<float> z(static_cast<std::size_t>(x.numel()));
  const std::uint64_t step = rng::step_key(key.seed, key.stream, key.step);
  constexpr double kTwoTo32 = 4294967296.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint64_t row = rng::row_key(step, key.first_example + r);
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint64_t h = rng::mix(row + static_cast<std::uint64_t>(c));
      const double u1 = (static_cast<double>(h >> 32) + 0.5) / kTwoTo32;  // in (0, 1): its log is finite
      const double u2 = static_cast<double>(h & 0xffffffffULL) / kTwoTo32;
      z[static_cast<std::size_t>(r * cols + c)] =
          static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
    }
  }
  const Tensor noise = Tensor::from_vector(z, x.shape()).to(x.device());
  return x.dtype() == DType::kF32 ? noise : noise.to(x.dtype());
}

}  // namespace lockstep
