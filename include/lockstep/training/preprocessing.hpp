#pragma once
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

/// uint8 images (N, ...) -> float32 (N, prod(...)) scaled to [0, 1]: the usual MNIST input.
Tensor flatten_and_scale_images(const Tensor& images);

}  // namespace lockstep
