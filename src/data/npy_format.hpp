#pragma once
// The .npy parser, shared by read_npy (a file) and read_npz (archive members in memory).
#include "data/input_file.hpp"
#include "lockstep/tensor/tensor.hpp"

namespace lockstep::data::detail {

/// Parses one whole .npy image from `f`; IOError naming f.path() for anything malformed.
Tensor read_npy_from(InputFile& f);

}  // namespace lockstep::data::detail
