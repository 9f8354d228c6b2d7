#pragma once
#include "lockstep/tensor/tensor.hpp"

namespace lockstep {

class Model;
namespace data {
class Dataset;
}

/// What uint8 pixels are multiplied by to lie in [0, 1] (after a cast to float32).
inline constexpr float kPixelScale = 1.0f / 255.0f;

/// uint8 images (N, ...) -> float32 (N, prod(...)) scaled to [0, 1] (times kPixelScale): the
/// usual MNIST input.
Tensor flatten_and_scale_images(const Tensor& images);

/// Whether `model` scales its own input: its first layer after any Input is Rescaling (Keras'
/// preprocessing inside the model). `lockstep train`, `evaluate` and `predict` give such a model
/// images as their pixels.
bool rescales_its_input(const Model& model);
/// Whether `model` takes integer inputs as they are (Model::input_of casts others to float32):
/// it rescales its input, or its first layer after any Input is Embedding (which checks the ids
/// before its own cast: on the host where the input path kept their bytes, so a GPU does not wait).
bool takes_integer_input(const Model& model);

/// Images (N, ...) -> (N, prod(...)) for a model that does (`model_rescales`) or does not scale
/// its own input: the pixels as they are for the first (uint8 stays uint8: a quarter of float32's
/// bytes to shuffle, gather and copy to a device; each replica casts its own slice), and
/// flatten_and_scale_images for the second. Either way the model sees the same numbers.
Tensor flatten_images_for(const Tensor& images, bool model_rescales);

/// from_tensor_slices(x, y) for a model that does (`model_rescales`) or does not scale its own
/// input, x's uint8 pixels as they are (flatten_images_for(images, true), maybe reshaped): for the
/// second, batch() casts and scales them as it gathers each batch (Dataset::cast_and_scale,
/// kPixelScale), the floats flatten_and_scale_images gives, bit for bit, without a float32 copy
/// of the whole set. Other dtypes are left as they are.
data::Dataset image_slices(const Tensor& x, const Tensor& y, bool model_rescales);

}  // namespace lockstep
