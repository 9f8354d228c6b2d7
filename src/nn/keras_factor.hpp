#pragma once
// Keras' factor arguments of its image augmentation layers, read once (preprocessing_layers.cpp).
#include <string>
#include <utility>
#include <vector>

namespace lockstep::layers {

/// "(a, b)": numbers as a message writes them.
std::string floats_str(const std::vector<float>& v);

/// Keras' BaseImagePreprocessingLayer._set_factor with its _FACTOR_BOUNDS (lo, hi): (lower,
/// upper). A number f must lie in [lo, hi] and is (max(-|f|, lo), |f|); a pair is sorted, refused
/// only where it lies wholly outside the bounds (f[0] > hi or f[1] < lo); anything else is refused
/// with Keras' message, which starts with `cls`.
std::pair<float, float> keras_factor(const char* cls, const std::vector<float>& f, float lo, float hi);

}  // namespace lockstep::layers
