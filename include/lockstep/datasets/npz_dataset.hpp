#pragma once
// A dataset in an .npz archive laid out as keras.datasets returns one:
// np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...).
#include <cstdint>
#include <string>

#include "lockstep/datasets/split.hpp"

namespace lockstep::datasets {

/// Reads the four arrays. x_* hold one example per row (any rank >= 2, uint8 or float32, the
/// same per-example shape in both splits); y_* are integer class labels, (N,) or (N, 1), in
/// [0, classes). Throws IOError naming the file and the problem: not an .npz, a missing array,
/// x and y of different lengths, an empty split, mismatched example shapes, labels that are
/// not integers or are negative.
struct NpzOptions {
  /// Also accept targets that are not class labels (regression values, one-hot rows): y_* of
  /// float32, (N,) or (N, k), kept as they are, and integer y_* of (N, k > 1), made float32.
  /// Integer (N,) or (N, 1) targets are class labels either way. y_train and y_test must have
  /// the same number of values per example.
  bool any_targets = false;
};
TrainTest load_npz(const std::string& path, const NpzOptions& options = {});

/// The largest label of a dataset and where it stands, for an error that points at it: the
/// array ("y_train" or "y_test"), its index there (the first of equal ones) and the value
/// (-1 with no labels).
struct LabelAt {
  std::string array;
  std::int64_t index = 0;
  std::int64_t value = -1;
};
LabelAt largest_label(const TrainTest& data);

/// Classes of a dataset's labels: the largest label of either split, plus one.
std::int64_t num_classes(const TrainTest& data);

}  // namespace lockstep::datasets
