#pragma once
// Image resizing, the one owner of it: tf.image.resize, which Keras 3's Resizing layer,
// UpSampling2D (all but "nearest", never antialiased) and keras.ops.image.resize run on the
// TensorFlow backend (keras/src/backend/tensorflow/image.py resize).
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/tensor/ops_resample.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::layers {

/// Keras' interpolation names, each as tf.image.resize(antialias=False) computes it. Along each
/// axis of `in` to `out` pixels (scale = in / out in float, as TensorFlow's kernels):
/// - nearest (resize_nearest_neighbor, half-pixel centres): input min(floor((i + 0.5) * scale), in - 1).
/// - bilinear (resize_bilinear, half-pixel centres): s = (i + 0.5) * scale - 0.5 between the
///   inputs floor(s) and ceil(s), clamped to the image, weighted 1 - t and t, t = s - floor(s).
/// - bicubic (resize_bicubic, half-pixel centres): Keys' cubic with a = -0.5 on the inputs
///   floor(s) - 1 .. floor(s) + 2, its weights read from TensorFlow's table of 1024 steps
///   (t rounded to the nearest 1/1024); inputs outside the image get no weight and the others
///   are renormalized to sum to 1.
/// - lanczos3, lanczos5 (scale_and_translate, kernel radius r = 3 or 5): sample c = (i + 0.5) /
///   (out / in); the inputs j with ceil(c - r k - 0.5) <= j <= floor(c + r k - 0.5) inside the
///   image, weighted K((j + 0.5 - c) / k), K(x) = L(x) = r sin(pi x) sin(pi x / r) / (pi x)^2, and
///   renormalized to sum to 1. k, the kernel's widening, is 1 without antialias; with it, k =
///   max(in / out, 1): a shrinking kernel covers every input it shrinks over.
/// - area (resize_area, no half-pixel centres): output i averages the inputs over
///   [i * scale, (i + 1) * scale), each weighted by the length of it that it covers.
/// With antialias (tf.image.resize(antialias=True)), bilinear and bicubic are scale_and_translate
/// too, as the lanczos ones, with the kernels K(x) = max(1 - |x|, 0) ("triangle", r = 1) and
/// Keys' cubic with a = -0.5 in float ("keyscubic", r = 2); nearest and area ignore it.
enum class Interpolation { kNearest, kBilinear, kBicubic, kLanczos3, kLanczos5, kArea };

/// The interpolation Keras names `name`; anything else is refused with a message that starts
/// with `cls` (the layer's class) and lists the names.
Interpolation parse_interpolation(const std::string& name, const char* cls);
const char* interpolation_name(Interpolation method);

/// One axis' weights (the resample op's host taps): output i = sum over k < taps of
/// weight[i * taps + k] * input[index[i * taps + k]] (an output with fewer inputs has weight 0 on
/// its last taps; each input appears once per output).
using ResizeWeights = HostTaps;
/// The weights of one axis resized from `in` to `out` pixels by `method` (both positive).
ResizeWeights resize_weights(std::int64_t in, std::int64_t out, Interpolation method, bool antialias = false);

/// NHWC images x (N, H, W, C) resized to (N, out_h, out_w, C) by `method`: separably, one axis
/// after the other (the one that leaves the smaller intermediate first), each by the resample op
/// over its taps (the height's rows are the examples, the width's the image rows, no transposes),
/// from kept constants (device_constant: captured steps copy nothing); its gradient is the same
/// kernel over the transposed taps, on the CPU and the GPU alike. Where both axes grow with 2 x 2
/// taps at most on 32 channels or more (bilinear: a U-Net decoder's UpSampling2D), one resample
/// over the product of both axes' taps (each weight product rounded to float: the last bits differ
/// from the two passes'). Nearest is one gather of whole pixels.
/// Images that keep both sizes are returned as they are (tf.image.resize's skip_resize_if_same,
/// whatever the method); an axis that keeps its size where the method maps each output to its
/// input alone is not computed.
Tensor resize_images(const Tensor& x, std::int64_t out_h, std::int64_t out_w, Interpolation method,
                     bool antialias = false);

}  // namespace lockstep::layers
