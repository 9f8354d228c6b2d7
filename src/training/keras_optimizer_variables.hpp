#pragma once
// A compiled model's optimizer in a Keras 3 weights file (model.weights.h5 of a `.keras` archive,
// or a `.weights.h5`), as Keras' Optimizer.save_own_variables writes it: the group
// optimizer/vars (attribute name = the optimizer's Keras name) holding the datasets "0", "1", ...
// in the order of Keras' optimizer.variables:
//   iterations (int64 scalar), learning_rate (float32 scalar; absent under a schedule), then, once
//   built (its first step), each trainable variable's slots in the model's order (Adam and AdamW:
//   momentum, velocity; SGD with momentum: momentum), shaped as the variable.
// A LossScaleOptimizer's are its own iterations and learning_rate (which Keras never moves from
// 0), step_counter (int64) and dynamic_scale (float32) once built, then its inner optimizer's,
// which Keras writes once more under optimizer/inner_optimizer/vars.
#include <functional>
#include <string>

#include "lockstep/io/hdf5_file.hpp"
#include "lockstep/training/model.hpp"

namespace lockstep::detail {

/// Adds the optimizer's variables of `model` to `h5`; nothing for a model not compiled.
void add_keras_optimizer_variables(const Model& model, io::H5Content& h5);

/// Checks the optimizer's variables in `h5` against `model`'s optimizer and returns what restores
/// them (slots, iterations, the rate, a loss scale's state), to run once the weights are assigned,
/// so that fit continues as if never saved; empty where there is nothing to restore: no
/// optimizer (uncompiled), no optimizer variables in the file, or only those of an optimizer saved
/// before its first step (a fresh optimizer, as then). A file whose optimizer has another number
/// of variables is skipped with a WARNING on stderr, as Keras 3's load_own_variables warns and
/// skips; a dataset of another shape or dtype, or a value out of range, is an IOError naming it
/// (`source` first), before anything is assigned.
std::function<void()> check_keras_optimizer_variables(const io::H5Content& h5, const std::string& source,
                                                      Model& model);

}  // namespace lockstep::detail
