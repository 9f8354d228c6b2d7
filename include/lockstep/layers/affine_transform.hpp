#pragma once
// The affine (projective) image transform, the one owner of it: keras.ops.image.affine_transform
// on the TensorFlow backend (keras/src/backend/tensorflow/image.py), which runs TensorFlow's
// ImageProjectiveTransformV3 (tensorflow/core/kernels/image/image_ops.h). Keras 3's
// RandomTranslation, RandomRotation and RandomZoom call it.
#include <string>

#include "lockstep/layers/image_resize.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::layers {

/// How an input coordinate outside the image is brought back (image_ops.h's MapCoordinate), for
/// a coordinate c along an axis of `len` pixels (len > 1; an axis of one pixel reads pixel 0):
/// - reflect, (d c b a | a b c d | d c b a): c < 0: c += 2 len * trunc(-c / (2 len)), then
///   c < -len ? c + 2 len : -c - 1; c > len - 1: c -= 2 len * trunc(c / (2 len)), then
///   c >= len ? 2 len - c - 1 : c; then clamped to [0, len - 1].
/// - wrap, (a b c d | a b c d | a b c d): c < 0: c += len * (trunc(-c / (len - 1)) + 1);
///   c > len - 1: c -= len * trunc(c / (len - 1)); then clamped to [0, len - 1].
/// - constant, (k k k k | a b c d | k k k k): c as it is; a pixel read outside the image is
///   fill_value.
/// - nearest, (a a a a | a b c d | d d d d): c clamped to [0, len - 1].
enum class FillMode { kReflect, kWrap, kConstant, kNearest };

/// The fill mode Keras names `name` ("reflect", "wrap", "constant", "nearest"); anything else is
/// a ValueError that starts with `cls` and lists them.
FillMode parse_fill_mode(const std::string& name, const char* cls);
const char* fill_mode_name(FillMode mode);

/// NHWC images (N, H, W, C) transformed by `transforms`, float32 (N, 8) or (1, 8) for all images,
/// on the images' device: row [a0, a1, a2, b0, b1, b2, c0, c1] maps the output pixel (x, y) =
/// (column, row) to the input point ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k),
/// k = c0 x + c1 y + 1 (an output where k = 0 is fill_value). The point's coordinates are brought
/// back by `fill_mode`, then read by `interpolation`:
/// - kNearest: the pixel at (round(x), round(y)), halves rounded away from zero;
/// - kBilinear: the pixels at floor and floor + 1 of each coordinate, weighted as image_ops.h's
///   bilinear_interpolation: the two of each row by (x_ceil - x, x - x_floor), then the rows by
///   (y_ceil - y, y - y_floor);
/// where a pixel outside the image reads fill_value. Coordinates are computed in float32 as
/// TensorFlow computes them; 16-bit images are transformed in float32 and rounded once. Where
/// fill_mode is constant and a point lies more than one pixel outside the image along an axis,
/// its weights along that axis are taken as (1, 0) (TensorFlow's weight the fill value alike, so
/// the output is fill_value but for TensorFlow's rounding of fill_value * w0 + fill_value * w1).
/// Composed of recorded ops (elementwise, a gather of rows by an index computed on the device,
/// as Embedding gathers), so it runs on every backend and in captured steps, and the images get
/// their gradient (the transforms get none, as TensorFlow's). Other interpolations are refused.
Tensor affine_transform(const Tensor& images, const Tensor& transforms, Interpolation interpolation,
                        FillMode fill_mode, float fill_value = 0.0f);

}  // namespace lockstep::layers
