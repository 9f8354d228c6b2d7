#pragma once
// The (name, value) pairs fit's and evaluate's progress bars show of their logs, in one order.
#include <string>
#include <utility>
#include <vector>

#include "lockstep/training/callback.hpp"

namespace lockstep::detail {

/// Loss, the other losses and the metrics, their val_ ones, then lockstep's input share as
/// "input"; not the keys only logs carry (steps per second, peak memory, GPU utilisation, loss
/// scaling: History, CSVLogger and TensorBoard have them).
std::vector<std::pair<std::string, double>> progbar_values(const Logs& logs);

}  // namespace lockstep::detail
