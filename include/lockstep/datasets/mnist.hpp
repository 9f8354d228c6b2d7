#pragma once
// MNIST handwritten digits: 60,000 training and 10,000 test images, 28x28 uint8, labels 0-9.
#include <string>

#include "lockstep/datasets/split.hpp"

namespace lockstep::datasets::mnist {

/// Loads <data_dir()>/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or with a
/// .gz suffix. x: uint8 (N, 28, 28); y: uint8 (N,). A missing file throws IOError naming the
/// paths looked for and scripts/setup.sh, which puts the files there.
TrainTest load_data();
/// The same from the folder `dir` that holds the four files.
TrainTest load_data(const std::string& dir);

}  // namespace lockstep::datasets::mnist
