#pragma once
// What Keras' image layers share, checked and read in one place: the batched-images input they
// take, and the factor arguments of its augmentation layers (RandomContrast, RandomBrightness,
// RandomTranslation, RandomRotation, RandomZoom).
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/shape.hpp"
#include "lockstep/layers/layer.hpp"

namespace lockstep::layers {

/// ValueError unless `s` is batched images (batch, height, width, channels), naming the layer.
void check_images(const Layer& layer, const Shape& s);

/// "(a, b)": numbers as a message writes them.
std::string floats_str(const std::vector<float>& v);

/// A factor argument as a config holds it: a number, or a list of numbers; anything else is a
/// ValueError naming `cls` and `arg`. Its values are judged by the layer (keras_factor).
std::vector<float> factor_from_json(const nlohmann::json& j, const char* cls, const char* arg);

/// Keras' BaseImagePreprocessingLayer._set_factor with its _FACTOR_BOUNDS (lo, hi): (lower,
/// upper). A number f must lie in [lo, hi] and is (max(-|f|, lo), |f|); a pair is sorted, refused
/// only where it lies wholly outside the bounds (f[0] > hi or f[1] < lo); anything else is refused
/// with Keras' message, which starts with `cls`.
std::pair<float, float> keras_factor(const char* cls, const std::vector<float>& f, float lo, float hi);

}  // namespace lockstep::layers
