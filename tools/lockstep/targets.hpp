#pragma once
// What `lockstep train --loss` makes of the data's targets: the loss, the model's head (its
// outputs and activation) and the metrics reported, or an error naming the flag and the shape
// when the targets do not fit the loss.
#include <cstdint>
#include <string>
#include <vector>

#include "commands.hpp"
#include "lockstep/datasets/split.hpp"

namespace lockstep::cli {

/// The names --loss accepts (Keras' loss names).
inline const char* const kLossNames[] = {"sparse_categorical_crossentropy", "categorical_crossentropy",
                                         "binary_crossentropy", "mse", "mean_squared_error", "mae",
                                         "mean_absolute_error"};

struct TargetPlan {
  std::string loss;                  // --loss, or sparse_categorical_crossentropy for class labels
  std::int64_t outputs = 0;          // units of the model's last Dense
  std::string activation;            // of that Dense: softmax, sigmoid (binary) or linear (regression)
  bool class_labels = false;         // integer labels: a file model may have more outputs than classes
  std::vector<std::string> metrics;  // accuracy for classification, mae for regression
};

/// The plan for `data`'s targets under args.loss (empty: sparse_categorical_crossentropy, which
/// needs integer labels). Integer labels give largest + 1 classes (or --num-classes, which every
/// label must be below; at most 65536 inferred); rows (N, k) give k outputs; (N,) targets of
/// another loss give one. ValueError naming `source`, the flag and the shape for targets the loss
/// cannot take (float targets under a sparse loss, labels under categorical_crossentropy, values
/// outside [0, 1] under binary_crossentropy), and
/// for --num-classes with a loss that has no classes to count.
TargetPlan plan_targets(const TrainArgs& args, const datasets::TrainTest& data, const std::string& source);

}  // namespace lockstep::cli
