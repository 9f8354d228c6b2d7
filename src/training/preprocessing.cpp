#include "lockstep/training/preprocessing.hpp"

#include "lockstep/data/dataset.hpp"
#include "lockstep/layers/conv_layers.hpp"
#include "lockstep/layers/core_layers.hpp"
#include "lockstep/layers/sequence_layers.hpp"
#include "lockstep/tensor/ops.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep {

namespace {
// From the shape, not numel / n: (0, 28, 28) has 784 features, not 0.
Tensor flatten(const Tensor& images, const char* what) {
  LOCKSTEP_CHECK(images.rank() >= 1, what, ": images need a batch dimension, got ", images.shape().str());
  return images.reshape({images.dim(0), images.shape().tail().numel()});
}
}  // namespace

Tensor flatten_and_scale_images(const Tensor& images) {
  const Tensor flat = flatten(images, "flatten_and_scale_images");
  // Pixels in one pass: no float32 copy besides the result (the caching allocator would keep a
  // second one, the test set's 31 MiB for MNIST, for the whole run).
  return images.dtype() == DType::kU8 ? cast_and_scale(flat, kPixelScale) : flat.to(DType::kF32);
}

bool rescales_its_input(const Model& model) {
  for (const auto& layer : model.layers()) {
    if (dynamic_cast<const layers::InputLayer*>(layer.get())) continue;
    return dynamic_cast<const layers::RescalingLayer*>(layer.get()) != nullptr;
  }
  return false;
}

bool takes_integer_input(const Model& model) {
  if (rescales_its_input(model)) return true;
  for (const auto& layer : model.layers()) {
    if (dynamic_cast<const layers::InputLayer*>(layer.get())) continue;
    return dynamic_cast<const layers::EmbeddingLayer*>(layer.get()) != nullptr;
  }
  return false;
}

Tensor flatten_images_for(const Tensor& images, bool model_rescales) {
  return model_rescales ? flatten(images, "flatten_images_for") : flatten_and_scale_images(images);
}

data::Dataset image_slices(const Tensor& x, const Tensor& y, bool model_rescales) {
  const data::Dataset slices = data::Dataset::from_tensor_slices(x, y);
  return !model_rescales && x.dtype() == DType::kU8 ? slices.cast_and_scale(kPixelScale) : slices;
}

}  // namespace lockstep
