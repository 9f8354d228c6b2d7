#include "lockstep/training/preprocessing.hpp"

#include "lockstep/tensor/ops.hpp"

namespace lockstep {

Tensor flatten_and_scale_images(const Tensor& images) {
  LOCKSTEP_CHECK(images.rank() >= 1, "flatten_and_scale_images: images need a batch dimension, got ",
                 images.shape().str());
  const std::int64_t n = images.dim(0);
  // From the shape, not numel / n: (0, 28, 28) has 784 features, not 0.
  const std::int64_t features = images.shape().tail().numel();
  const Tensor f = images.to(DType::kF32).reshape({n, features});
  return images.dtype() == DType::kU8 ? scale(f, 1.0f / 255.0f) : f;
}

}  // namespace lockstep
