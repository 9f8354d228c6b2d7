#pragma once
// Checks of the data `lockstep train` loads, before any training: a NaN in x_test trained, then
// reported a NaN test loss with exit status 0.
#include <string>

#include "lockstep/datasets/split.hpp"

namespace lockstep::cli {

/// ValueError "<source>: <array> holds a non-finite value (nan) at element i" for the first NaN
/// or infinity in a floating-point array of `data` (x_train, y_train, x_test, y_test, in that
/// order); integer arrays cannot hold one. One pass over each array, no copy.
void check_finite_data(const datasets::TrainTest& data, const std::string& source);

}  // namespace lockstep::cli
