#pragma once
// Fashion-MNIST (Zalando): 60,000 training and 10,000 test 28x28 uint8 images of clothing,
// labels 0-9, in MNIST's format and file names.
#include <string>

#include "lockstep/datasets/split.hpp"

namespace lockstep::datasets::fashion_mnist {

/// Looks in <data_dir()>/fashion_mnist, then in /usr/share/datasets/fashion-mnist (Debian's
/// dataset-fashion-mnist package); files raw or .gz. Same shapes, dtypes and errors as
/// mnist::load_data().
TrainTest load_data();
/// The same from the folder `dir` that holds the four files.
TrainTest load_data(const std::string& dir);

}  // namespace lockstep::datasets::fashion_mnist
