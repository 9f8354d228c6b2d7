#include "lockstep/training/preprocessing.hpp"

namespace lockstep {

Tensor flatten_and_scale_images(const Tensor& images) {
  LOCKSTEP_CHECK(images.rank() >= 1, "flatten_and_scale_images: images need a batch dimension, got ",
                 images.shape().str());
  const std::int64_t n = images.dim(0);
  const std::int64_t features = n ? images.numel() / n : 0;
  Tensor f = images.to(DType::kF32).reshape({n, features});
  float* p = f.data<float>();
  const float s = images.dtype() == DType::kU8 ? 1.0f / 255.0f : 1.0f;
  for (std::int64_t i = 0, count = f.numel(); i < count; ++i) p[i] *= s;
  return f;
}

}  // namespace lockstep
