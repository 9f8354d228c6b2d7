#pragma once
// What the built-in datasets' load_data() return, as keras.datasets does: (x, y) pairs.
#include <string>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::datasets {

struct Split {
  Tensor x;  // inputs, e.g. uint8 (N, 28, 28) images
  Tensor y;  // targets, e.g. uint8 (N,) class labels
};

struct TrainTest {
  Split train;
  Split test;
};

/// Where the built-in datasets live: $LOCKSTEP_DATA_DIR when set and not empty, otherwise
/// $HOME/.lockstep/datasets. scripts/setup.sh fills it. Throws IOError when neither variable
/// is set. Each dataset has a folder below it (mnist/, fashion_mnist/).
std::string data_dir();

}  // namespace lockstep::datasets
